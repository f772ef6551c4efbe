// Hopper's dashboard: actions as POSTs carrying the page's CSRF token, and the page's main
// part refreshed every few seconds while nothing is selected.
"use strict";
const csrf = document.querySelector('meta[name="csrf"]').content;
const every = Number(document.body.dataset.refresh || 0);

function flash(text) {
  const box = document.getElementById("flash");
  box.textContent = text;
  box.style.display = "block";
  setTimeout(() => { box.style.display = "none"; }, 4000);
}

async function act(path, body) {
  const answer = await fetch(path, {
    method: "POST",
    headers: { "x-hopper-csrf": csrf, "content-type": "application/json" },
    body: body === undefined ? null : JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) { flash(data.error || answer.statusText); return null; }
  return data;
}

function selected() {
  return [...document.querySelectorAll("input.pick:checked")].map((c) => Number(c.value));
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-post]");
  if (!button) return;
  const path = button.dataset.post;
  let body;
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  if (button.dataset.typed) {
    const typed = window.prompt(`Type ${button.dataset.typed} to confirm`);
    if (typed !== button.dataset.typed) return;
  }
  if (button.dataset.body === "picked") {
    const ids = selected();
    if (ids.length === 0) { flash("Select jobs first."); return; }
    body = { ids };
  } else if (button.dataset.body === "all") {
    body = { all: true };
  }
  const done = await act(path, body);
  if (done) {
    flash(`${button.textContent.trim()}: ${done.changed} changed`);
    if (button.dataset.then) { location.href = button.dataset.then; } else { refresh(); }
  }
});

document.addEventListener("change", (event) => {
  if (event.target.id === "pick-all") {
    document.querySelectorAll("input.pick").forEach((c) => { c.checked = event.target.checked; });
  }
});

async function refresh() {
  const answer = await fetch(location.href, { credentials: "same-origin" });
  if (!answer.ok) return;
  const page = new DOMParser().parseFromString(await answer.text(), "text/html");
  const fresh = page.querySelector("main");
  if (fresh) document.querySelector("main").replaceWith(fresh);
}

if (every > 0) {
  setInterval(() => {
    if (document.hidden || selected().length > 0) return;
    refresh();
  }, every * 1000);
}
