"use strict";
// The live page of a table: the spectator's events and view, pushed by the referee
// (Server-Sent Events from /tables/ID/events). It shows them; it knows no rule.
(() => {
  const { el, card, seats } = Tapis;
  const setup = JSON.parse(document.getElementById("tapis-setup").textContent);
  const $ = (id) => document.getElementById(id);
  const show = (id) => card(setup.cards, setup.suits, id);
  let info = null;
  let boxes = [];
  let lastTrick = null; // the trick last completed: on view until the next card
  let lastAction = "";
  let hand = 0; // the hand the events are of

  const name = (s) => (info && info.seats[s] ? info.seats[s].name : "seat " + s);
  const scoreText = (sc) => info.units.map((u) => Number(sc[u] || 0) + (info.units.length > 1 ? " " + u : "")).join(" ");

  function onTable(d) {
    info = d;
    const title = d.title + (d.ruleset !== "standard" ? " (" + d.ruleset + ")" : "");
    $("title").textContent = title + ": " + d.seats.map((s) => s.name).join(", ");
    document.title = title + " - table " + d.table_id;
    $("status").textContent = "table " + d.table_id + ": " + d.status;
    if (boxes.length !== d.seats.length) boxes = seats($("board"), d.seats.length);
    if (d.record_id) {
      const base = "/tables/" + encodeURIComponent(d.table_id);
      $("links").replaceChildren("record " + d.record_id.slice(0, 16) + ": ",
        el("a", { href: base + "/replay", id: "replay-link" }, "replay"), " · ",
        el("a", { href: base + "/record.tapis" }, "download"));
    }
  }

  function renderTrick(v) {
    const trick = v.trick || [];
    let plays = trick;
    let winner = -1;
    if (!plays.length && lastTrick) {
      plays = lastTrick.cards;
      winner = lastTrick.winner;
    }
    $("trick").replaceChildren(...plays.map((p) =>
      el("div", { class: "play" }, card(setup.cards, setup.suits, p.card, p.seat === winner ? "won" : ""), name(p.seat))));
    $("trick-note").textContent = winner >= 0 ? name(winner) + " wins trick " + lastTrick.number : "";
    $("last").textContent = lastAction;
  }

  function typedValue(f) {
    if (f.cards) return f.cards.cards.length ? f.cards.cards.map(show) : "none";
    if (f.card_groups) return f.card_groups.groups.map((g, s) => g.cards && g.cards.length ? el("span", {}, name(s) + ": ", g.cards.map(show), " ") : "");
    return null;
  }

  function onView(v) {
    if (!info) return;
    $("board").dataset.eventIndex = v.event_index; // the events the board shows
    const toAct = v.to_act || [];
    const known = {};
    for (const k of v.known || []) known[k.seat] = k.cards;
    boxes.forEach((box, s) => {
      box.classList.toggle("acting", toAct.includes(s));
      const sc = (v.scores || [])[s];
      const tags = [];
      if (v.phase !== "waiting" && v.dealer === s) tags.push("dealer");
      if (!info.seats[s].taken) tags.push("(open seat)");
      box.replaceChildren(
        el("div", {}, el("span", { class: "name" }, name(s)), el("span", { class: "tag" }, tags.join(" ")),
          el("span", { class: "tag" }, sc ? scoreText(sc) : "")),
        el("div", { class: "cards" }, known[s] ? known[s].map((c) => card(setup.cards, setup.suits, c, "shown")) : ""));
    });
    renderTrick(v);
    const rows = [];
    if (v.phase && v.phase !== "waiting") rows.push(el("div", {}, el("span", { class: "key" }, "hand "), v.hand_number + ", " + v.phase));
    if (v.trump !== undefined) rows.push(el("div", {}, el("span", { class: "key" }, "trump "), setup.suits[v.trump]));
    const typed = {};
    for (const f of v.typed_facts || []) typed[f.key] = f;
    for (const f of v.facts || []) {
      const cards = typed[f.key] ? typedValue(typed[f.key]) : null;
      rows.push(el("div", {}, el("span", { class: "key" }, f.key.replace(/_/g, " ") + " "), cards === null ? f.value : cards));
    }
    $("facts").replaceChildren(...rows);
    $("status").textContent = "table " + info.table_id + ": " + (v.table_status || info.status) +
      (toAct.length ? ", waiting for " + toAct.map(name).join(", ") : "");
  }

  function eventText(e) {
    if (e.seat_taken) {
      const t = e.seat_taken;
      if (info && info.seats[t.seat]) Object.assign(info.seats[t.seat], { name: t.name, taken: true });
      if (info) onTable(info);
      return t.name + " takes seat " + t.seat;
    }
    if (e.hand_started) {
      lastTrick = null;
      const h = e.hand_started;
      return ["Hand " + h.number + " dealt by " + name(h.dealer), h.retourne !== undefined ? [", retourne ", show(h.retourne)] : ""];
    }
    if (e.action_taken) {
      lastAction = name(e.action_taken.seat) + ": " + e.action_taken.text;
      return lastAction;
    }
    if (e.trick_completed) {
      const t = e.trick_completed;
      lastTrick = { number: t.number, winner: t.winner, cards: t.cards };
      return name(t.winner) + " wins trick " + t.number;
    }
    if (e.score_line) {
      const l = e.score_line;
      return [name(l.seat) + ": " + l.kind + " " + scoreText(l.delta) + (l.note ? " (" + l.note + ")" : "") + " ",
        el("span", { class: "mono" }, "[" + l.rule + "]")];
    }
    if (e.note) return e.note.text;
    if (e.hand_ended) return "Hand " + e.hand_ended.number + " over: " + e.hand_ended.scores.map((s, i) => name(i) + " " + scoreText(s)).join(", ");
    if (e.match_ended) {
      const m = e.match_ended;
      return "Match over: won by " + m.winners.map(name).join(", ") + (m.reason ? " (" + m.reason + ")" : "");
    }
    if (e.table_closed) return "Table closed: " + e.table_closed.reason;
    if (e.cards_passed) {
      const p = e.cards_passed;
      return name(p.seat) + " passes " + p.count + " cards to " + name(p.to_seat);
    }
    if (e.cards_taken) return [name(e.cards_taken.seat) + " takes ", show(e.cards_taken.took)];
    if (e.cards_shown) {
      const c = e.cards_shown;
      return [name(c.seat) + " shows ", c.cards.map(show), " (" + c.why + ") ", el("span", { class: "mono" }, "[" + c.rule + "]")];
    }
    return null;
  }

  function onEvent(e) {
    const text = eventText(e);
    if (text === null) return;
    const log = $("log");
    if (e.hand_started) hand = e.hand_started.number;
    const action = e.action_taken ? e.action_taken.action_index : null;
    log.append(el("li", { "data-index": e.index, "data-action": action, "data-hand": hand,
      class: e.hand_started ? "hand-start" : null }, text));
    while (log.children.length > 400) log.firstChild.remove();
    log.scrollTop = log.scrollHeight;
  }

  const source = new EventSource("/tables/" + encodeURIComponent(setup.table_id) + "/events");
  source.addEventListener("table", (m) => onTable(JSON.parse(m.data)));
  source.addEventListener("view", (m) => onView(JSON.parse(m.data)));
  source.addEventListener("event", (m) => onEvent(JSON.parse(m.data)));
  source.addEventListener("end", () => {
    source.close();
    const over = info.status === "finished" ? "the match is over" : "the table is closed";
    $("status").textContent = "table " + info.table_id + ": " + info.status + " (" + over + ")";
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CONNECTING) $("status").textContent = "reconnecting...";
  });
})();
