"""An archive of records in one SQLite file (sqlite-utils), and re-scoring it.

One module per concern, their public names importable from here (each module is loaded when
one of its names is first used: a re-scoring worker loads only `shards`):

- `schema`: the tables, `open_archive`, `ArchiveError`, `damaged`/`is_damage` (a file whose
  pages do not hold together, said alike by every command);
- `add`: `add_files`, `add_envelopes`: records verified, then stored in chunks
  (`AddTask`/`check_task`, run by an executor);
- `query`: `Selection`, `query_records`, `iter_records`, `iter_envelopes`, `find_record`;
- `rescoring`: `rescore` of a whole archive in shards, continued when interrupted; `shards`:
  its task (`Shard`/`run_shard`), what a worker runs (one record's report is
  records/rescore.py's `rescore_record`);
- `summary`: the counts of a run, `list_runs`, `run_results`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tapis_cartes.lazy import load

if TYPE_CHECKING:
    from tapis_cartes.records.archive.add import (
        ADD_CHUNK,
        AddReport,
        AddTask,
        add_envelopes,
        add_files,
        check_task,
    )
    from tapis_cartes.records.archive.query import (
        Selection,
        find_record,
        iter_envelopes,
        iter_records,
        query_records,
    )
    from tapis_cartes.records.archive.rescoring import check_changes, rescore
    from tapis_cartes.records.archive.schema import ArchiveError, damaged, is_damage, open_archive
    from tapis_cartes.records.archive.shards import Shard, run_shard
    from tapis_cartes.records.archive.summary import list_runs, run_results
    from tapis_cartes.records.rescore import RescoreSummary, rescore_record

# Each public name and the module it comes from.
_FROM = {
    "ADD_CHUNK": "add",
    "AddReport": "add",
    "AddTask": "add",
    "add_envelopes": "add",
    "add_files": "add",
    "check_task": "add",
    "Selection": "query",
    "find_record": "query",
    "iter_envelopes": "query",
    "iter_records": "query",
    "query_records": "query",
    "check_changes": "rescoring",
    "rescore": "rescoring",
    "ArchiveError": "schema",
    "damaged": "schema",
    "is_damage": "schema",
    "open_archive": "schema",
    "Shard": "shards",
    "run_shard": "shards",
    "list_runs": "summary",
    "run_results": "summary",
    "RescoreSummary": "tapis_cartes.records.rescore",
    "rescore_record": "tapis_cartes.records.rescore",
}

__all__ = [
    "ADD_CHUNK",
    "AddReport",
    "AddTask",
    "ArchiveError",
    "RescoreSummary",
    "Selection",
    "Shard",
    "add_envelopes",
    "add_files",
    "check_changes",
    "check_task",
    "damaged",
    "find_record",
    "is_damage",
    "iter_envelopes",
    "iter_records",
    "list_runs",
    "open_archive",
    "query_records",
    "rescore",
    "rescore_record",
    "run_results",
    "run_shard",
]


def __getattr__(name: str) -> Any:
    return load(__name__, name, _FROM)
