"""Structured record mutations, re-signed with a valid key, verified with bounded memory.

    python scripts/fuzz_records.py [-n 10000] [--seed S] [--matches 3] [--limit-mib 1024]
        [--show 10]

Records of every game and ruleset (tests/data/*.tapis, and matches played in process by
random legal actions, dealt from a seed, finished, resigned and stopped in a hand) are
mutated field by field and re-encoded (tests/records/mutants.py), each mutant signed with a
fresh Ed25519 key, and all verified (`verify_frame`, with that key) in a child process whose
address space is limited (`RLIMIT_AS`). Each accepted mutant is put to an oracle that does not
ask the verifier (the same bytes; only free fields changed; export to a transcript and import
give the same bytes; or played again one action at a time). Prints the counts: mutants,
refused by code, accepted, accepted and genuine by the oracle, crashes, internal errors, peak
memory of the child. Exit status 1 when there is a crash, an internal error or an accepted
mutant the oracle does not confirm.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tapis_cartes.records.codec import write_frames
from tapis_cartes.records.signing import public_pem, sign
from tapis_cartes.v1 import record_pb2 as pb
from tests.records.mutants import MEMORY_LIMIT, corpus, mutants, oracle, verify_in_subprocess


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="mutants (default 10000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the mutations (default 1)")
    ap.add_argument("--matches", type=int, default=3, metavar="K",
                    help="matches played per game, ruleset and ending (default 3)")  # fmt: skip
    ap.add_argument("--limit-mib", type=int, default=MEMORY_LIMIT >> 20,
                    help="address space of the verifying process, MiB (default 1024)")  # fmt: skip
    ap.add_argument("--show", type=int, default=10, metavar="K",
                    help="list up to K mutants of each problem (default 10)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("-n must be at least 1")

    t0 = time.perf_counter()
    records = corpus(args.matches)
    key = Ed25519PrivateKey.generate()
    batch = list(mutants(records, args.n, args.seed))
    with tempfile.TemporaryDirectory(prefix="tapis-fuzz-") as tmp:
        key_path = Path(tmp) / "key.pem"
        key_path.write_text(public_pem(key.public_key()))
        path = Path(tmp) / "mutants.tapis"
        write_frames(path, (sign(m, key).SerializeToString(deterministic=True) for *_, m in batch))
        made = time.perf_counter()
        got = verify_in_subprocess(path, len(batch), key_path, args.limit_mib << 20)
    verified_in = time.perf_counter() - made

    refused: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    unconfirmed = []
    internal = []
    for (k, label, what, mutant), code, message in zip(batch, got.codes, got.messages, strict=True):
        if code is None:
            why = oracle(records[k][1], mutant)
            reasons[why or "NOT CONFIRMED"] += 1
            if why is None:
                unconfirmed.append(f"{label}: {what}")
        elif code == "internal":
            internal.append(f"{label}: {what}: {message}")
        elif code != "crash":
            refused[code] += 1
    accepted = sum(reasons.values())
    confirmed = accepted - len(unconfirmed)
    games = Counter(pb.GameRecord.FromString(data).rules.game for _, data in records)
    per_game = ", ".join(f"{g} {n}" for g, n in sorted(games.items()))
    print(f"records mutated: {len(records)} ({per_game})")
    print(f"mutants: {len(batch)} (seed {args.seed}), made in {made - t0:.1f} s, verified in "
          f"{verified_in:.1f} s in a child limited to {args.limit_mib} MiB")  # fmt: skip
    print(f"refused: {sum(refused.values())}")
    for code, n in refused.most_common():
        print(f"  {code:32} {n:6}")
    print(f"accepted: {accepted}")
    print(f"accepted and genuine by the oracle: {confirmed}")
    for why, n in reasons.most_common():
        print(f"  {why:32} {n:6}")
    print(f"crashes: {len(got.crashes)}")
    print(f"internal errors: {len(internal)}")
    print(f"peak memory of the verifying process: {got.peak_kb / 1024:.0f} MiB")
    for title, items in (
        ("crashes", [f"mutant {i + 1}: {how}" for i, how in got.crashes]),
        ("internal errors", internal),
        ("accepted, not confirmed by the oracle", unconfirmed),
    ):
        if items:
            print(f"\n{title}:")
            for item in items[: args.show]:
                print(f"  {item[:300]}")
    return 1 if got.crashes or internal or unconfirmed else 0


if __name__ == "__main__":
    sys.exit(main())
