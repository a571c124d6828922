"use strict";
// The replay page: steps through the positions Tapis computed (records/html.py).
(() => {
  const { el, card, maskCards, seats, score, delta } = Tapis;
  const data = JSON.parse(document.getElementById("tapis-data").textContent);
  const $ = (id) => document.getElementById(id);
  let r = 0; // the record shown (a file may hold several)
  let h = 0; // its hand (0-based)
  let a = 0; // the position in the hand: 0 the deal, k after its k-th action
  let boxes = [];
  let shown = -1; // the record whose header and seats are drawn

  const rec = () => data.records[r];
  const hand = () => rec().hands[h];
  const lastOf = (hi) => rec().hands[hi].positions.length - 1;
  const show = (id) => card(data.cards, data.suits, id);
  const name = (s) => rec().seats[s] !== undefined ? rec().seats[s] : "seat " + s;

  function aboutRecord() {
    const d = rec();
    const v = d.verify;
    const lines = [];
    const title = d.title + (d.ruleset !== "standard" ? " (" + d.ruleset + ")" : "");
    $("title").textContent = title + ": " + d.seats.join(", ");
    document.title = title + " - Tapis replay";
    lines.push(el("div", {}, "options: " + (d.options.length ? d.options.join(", ") : "defaults")));
    if (d.provenance.source) {
      lines.push(el("div", {}, "source: " + d.provenance.source + " " + d.provenance.reference +
        (d.provenance.played_at ? ", played " + d.provenance.played_at : "")));
    }
    lines.push(el("div", {}, "record ", el("span", { class: "mono" }, d.record_id)));
    let sig = "not signed";
    if (v.signature === "valid") sig = "signed by " + (v.signer ? v.signer + " " : "") + "key " + v.key_id.slice(0, 16) + ", signature valid";
    else if (v.signature === "unchecked") sig = "signed by key " + v.key_id.slice(0, 16) + ", signature not checked (no key given)";
    else if (v.signature !== "none") sig = "signature " + v.signature;
    lines.push(el("div", { id: "verdict" },
      el("span", { class: v.ok ? "ok" : "bad" }, v.ok ? "verified: valid" : "INVALID: " + v.error),
      "; " + sig));
    const src = d.deal_source;
    if (src.algorithm) {
      lines.push(el("div", {}, "deals: " + src.algorithm + ", seed ", el("span", { class: "mono", id: "seed" }, src.seed),
        ", commitment ", el("span", { class: "mono" }, src.commitment)));
    }
    const o = d.outcome;
    const winners = o.winners.map(name).join(", ");
    lines.push(el("div", {}, (o.finished ? "finished" : "not finished") +
      (winners ? "; won by " + winners : "") + (o.reason ? " (" + o.reason + ")" : "")));
    for (const [hn, an, text] of d.stray_comments) {
      lines.push(el("div", { class: "comment stray" }, "comment on hand " + hn + ", action " + an +
        ", a position this record does not have (annotations are unsigned): # " + text));
    }
    $("about").replaceChildren(...lines);
    $("sheet").textContent = d.sheet;
    boxes = seats($("board"), d.seats.length);
  }

  function renderSeats(pos) {
    const d = rec();
    const hd = hand();
    boxes.forEach((box, s) => {
      const tags = [];
      if (s === hd.dealer) tags.push("dealer");
      const sc = pos.scores[s];
      box.classList.toggle("acting", pos.to_act.includes(s));
      // cards the rules have shown to all (impériales, the trump ace...) are marked
      const shown = new Set();
      for (const fact of Object.values(pos.cards)) {
        if (fact.length === d.seats.length && Array.isArray(fact[0])) fact[s].forEach((c) => shown.add(c));
      }
      const cards = maskCards(pos.held[s], d.order).map((c) => card(data.cards, data.suits, c, shown.has(c) ? "shown" : ""));
      box.replaceChildren(
        el("div", {}, el("span", { class: "name" }, name(s)),
          el("span", { class: "tag" }, tags.join(" ")),
          el("span", { class: "tag" }, sc ? score(d.units, sc) : "")),
        el("div", { class: "cards" }, cards.length ? cards : "(no cards)"));
    });
  }

  function renderTrick(pos) {
    const plays = pos.trick.map(([s, c]) =>
      el("div", { class: "play" }, card(data.cards, data.suits, c, s === pos.winner ? "won" : ""), name(s)));
    $("trick").replaceChildren(...plays);
    $("trick-note").textContent = pos.winner >= 0 ? name(pos.winner) + " wins trick " + pos.tricks : "";
    const last = $("last");
    if (a === 0) {
      last.replaceChildren("Hand " + hand().number + " dealt by " + name(hand().dealer));
      last.removeAttribute("data-card");
    } else {
      const others = pos.legal.filter((x) => x !== pos.action);
      last.replaceChildren(name(pos.seat) + ": " + pos.action + (pos.forced ? " (forced)" : ""),
        others.length ? el("div", { class: "legal" }, "could have: " + others.join(", "))
          : pos.choices > 1 ? el("div", { class: "legal" }, "one of " + pos.choices + " legal choices") : "",
        ...pos.comments.map((c) => el("div", { class: "comment" }, "# " + c)));
      last.setAttribute("data-card", pos.card);
    }
  }

  function factValue(pos, key, text) {
    const ids = pos.cards[key];
    if (ids === undefined) return text;
    if (ids.length && Array.isArray(ids[0])) {
      return ids.map((g, s) => g.length ? el("span", {}, name(s) + ": ", g.map(show), " ") : "");
    }
    return ids.length ? ids.map(show) : "none";
  }

  function renderFacts(pos) {
    const hd = hand();
    const rows = [el("div", {}, el("span", { class: "key" }, "hand "), hd.number + ", dealer " + name(hd.dealer) + ", " + pos.phase)];
    if (pos.trump >= 0) rows.push(el("div", {}, el("span", { class: "key" }, "trump "), data.suits[pos.trump]));
    if (hd.retourne >= 0) rows.push(el("div", {}, el("span", { class: "key" }, "retourne "), show(hd.retourne)));
    if (hd.talon.length) rows.push(el("div", {}, el("span", { class: "key" }, "talon as dealt "), hd.talon.map(show)));
    for (const [key, text] of pos.facts) {
      if (key === "retourne") continue;
      rows.push(el("div", {}, el("span", { class: "key" }, key.replace(/_/g, " ") + " "), factValue(pos, key, text)));
    }
    if (a === lastOf(h) && hd.describe) hd.describe.forEach((t) => rows.push(el("div", {}, t)));
    $("facts").replaceChildren(...rows);
  }

  let movesOf = null; // the hand whose moves are listed
  let scrolling = false;
  function renderMoves() {
    const list = $("moves");
    if (movesOf !== hand()) {
      movesOf = hand();
      list.replaceChildren(...hand().positions.slice(1).map((p, i) =>
        el("li", { onclick: () => go(r, h, i + 1) },
          name(p.seat) + ": " + p.action + (p.forced ? " (forced)" : ""),
          ...p.comments.map((c) => el("div", { class: "comment" }, "# " + c)))));
    }
    [...list.children].forEach((li, i) => { li.className = i + 1 === a ? "now" : i + 1 > a ? "future" : ""; });
    if (!scrolling) { // once a frame: reading the layout is what a step costs most
      scrolling = true;
      requestAnimationFrame(() => {
        scrolling = false;
        const now = list.querySelector(".now"); // scrolled into the list's view (not the page's)
        if (now && (now.offsetTop < list.scrollTop || now.offsetTop > list.scrollTop + list.clientHeight - 24)) {
          list.scrollTop = now.offsetTop - list.clientHeight / 2;
        }
      });
    }
  }

  function renderLines() {
    const d = rec();
    const hd = hand();
    const rows = (hd.lines || []).filter((l) => l.at <= a).map((l) =>
      el("tr", {}, el("td", {}, l.at ? "after " + l.at : "start"), el("td", {}, name(l.seat)),
        el("td", {}, l.kind + (l.note ? " (" + l.note + ")" : "")), el("td", {}, delta(d.units, l.delta)),
        el("td", { class: "rule" }, l.rule)));
    if (a === lastOf(h) && hd.scores_after && hd.scores_after.length) {
      rows.push(el("tr", {}, el("td", {}, "after the hand"), el("td", { colspan: 4 },
        hd.scores_after.map((s, i) => name(i) + " " + score(d.units, s)).join(", "))));
    }
    $("lines").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {}, "none yet"))]));
  }

  function render() {
    if (!rec().hands.length) {
      $("where").textContent = "no hand was played";
      document.querySelectorAll("nav button").forEach((b) => { b.disabled = true; });
      return;
    }
    const pos = hand().positions[a];
    renderSeats(pos);
    renderTrick(pos);
    renderFacts(pos);
    renderMoves();
    renderLines();
    const total = hand().positions.length - 1;
    $("where").textContent = "hand " + (h + 1) + "/" + rec().hands.length + ", action " + a + "/" + total;
    $("prev").disabled = $("prev-trick").disabled = $("first-hand").disabled = h === 0 && a === 0;
    const end = h === rec().hands.length - 1 && a === total;
    $("next").disabled = $("next-trick").disabled = $("next-hand").disabled = end;
  }

  function go(nr, nh, na) {
    r = Math.max(0, Math.min(nr, data.records.length - 1));
    if (r !== shown) {
      $("record-choice").value = String(r);
      aboutRecord();
      shown = r;
    }
    h = Math.max(0, Math.min(nh, rec().hands.length - 1));
    a = rec().hands.length ? Math.max(0, Math.min(na, lastOf(h))) : 0;
    render();
    const frag = "#" + (data.records.length > 1 ? "r" + (r + 1) : "") + "h" + (h + 1) + "a" + a;
    if (location.hash !== frag) history.replaceState(null, "", frag);
  }

  // -- stepping --------------------------------------------------------------------------
  function next() {
    if (a < lastOf(h)) go(r, h, a + 1);
    else if (h < rec().hands.length - 1) go(r, h + 1, 0);
  }
  function prev() {
    if (a > 0) go(r, h, a - 1);
    else if (h > 0) go(r, h - 1, lastOf(h - 1));
  }
  function nextTrick() {
    if (a === lastOf(h)) return next();
    let k = a + 1;
    while (k < lastOf(h) && hand().positions[k].winner < 0) k++;
    go(r, h, k);
  }
  function prevTrick() {
    if (a === 0) return prev();
    let k = a - 1;
    while (k > 0 && hand().positions[k].winner < 0) k--;
    go(r, h, k);
  }
  function nextHand() {
    if (h < rec().hands.length - 1) go(r, h + 1, 0);
    else go(r, h, lastOf(h));
  }
  function prevHand() {
    if (a > 0) go(r, h, 0);
    else go(r, h - 1, 0);
  }

  function fromFragment() {
    const m = /^#(?:r(\d+))?h(\d+)(?:a(\d+))?$/.exec(location.hash);
    if (m) go(m[1] ? +m[1] - 1 : 0, +m[2] - 1, m[3] ? +m[3] : 0);
    else go(r, h, a);
  }

  $("next").addEventListener("click", next);
  $("prev").addEventListener("click", prev);
  $("next-trick").addEventListener("click", nextTrick);
  $("prev-trick").addEventListener("click", prevTrick);
  $("next-hand").addEventListener("click", nextHand);
  $("first-hand").addEventListener("click", prevHand);
  document.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLSelectElement) return;
    const keys = {
      ArrowRight: e.shiftKey ? nextTrick : next,
      ArrowLeft: e.shiftKey ? prevTrick : prev,
      ArrowDown: nextTrick,
      ArrowUp: prevTrick,
      PageDown: nextHand,
      PageUp: prevHand,
      Home: () => go(r, 0, 0),
      End: () => go(r, rec().hands.length - 1, lastOf(rec().hands.length - 1)),
    };
    const act = keys[e.key];
    if (act) { e.preventDefault(); act(); }
  });
  window.addEventListener("hashchange", fromFragment);

  const choice = $("record-choice");
  if (data.records.length > 1) {
    choice.hidden = false;
    data.records.forEach((d, i) => choice.append(el("option", { value: i }, "record " + (i + 1) + ": " + d.title + ", " + d.seats.join(", "))));
    choice.addEventListener("change", () => go(+choice.value, 0, 0));
  } else {
    choice.append(el("option", { value: 0 }, "record 1"));
  }
  if (data.records.length === 0) {
    $("title").textContent = "No record";
    return;
  }
  fromFragment();
})();
