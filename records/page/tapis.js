"use strict";
// What the replay and live pages share: building elements, cards, seats around the table.
// No rule of any game is here: the pages show what Tapis computed.
const Tapis = (() => {
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  // A card: `cards[id]` is [rank text, suit index], `suits[suit]` its symbol.
  function card(cards, suits, id, extra) {
    const [rank, suit] = cards[id];
    return el("span", { class: "card s" + suit + (extra ? " " + extra : ""), "data-card": id },
      rank + suits[suit]);
  }

  // The card ids of a hexadecimal mask, in `order` (the game's display order).
  function maskCards(hex, order) {
    const mask = BigInt("0x" + (hex || "0"));
    return order.filter((c) => (mask >> BigInt(c)) & 1n);
  }

  // `n` seat boxes around the board, seat 0 at the bottom, going clockwise.
  function seats(board, n) {
    board.querySelectorAll(".seat").forEach((s) => s.remove());
    const out = [];
    for (let i = 0; i < n; i++) {
      const angle = Math.PI / 2 + (2 * Math.PI * i) / n;
      const box = el("div", { class: "seat", "data-seat": i });
      box.style.left = 50 + 33 * Math.cos(angle) + "%";
      box.style.top = 50 + 39 * Math.sin(angle) + "%";
      board.append(box);
      out.push(box);
    }
    return out;
  }

  // A score in the game's units: "12" or "3 imperiales 4 jetons".
  function score(units, values) {
    if (units.length === 1) return String(values[0]);
    return values.map((v, i) => v + " " + units[i]).join(" ");
  }

  function delta(units, values) {
    const sign = (v) => (v > 0 ? "+" : "") + v;
    if (units.length === 1) return sign(values[0]);
    return values.map((v, i) => (v ? sign(v) + " " + units[i] : "")).filter(Boolean).join(" ") || "0";
  }

  return { el, card, maskCards, seats, score, delta };
})();
