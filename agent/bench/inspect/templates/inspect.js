"use strict";
// Folded blocks keep their markup in a <template> until first opened ('toggle' does not bubble: capture it).
document.addEventListener("toggle", (event) => {
  const details = event.target;
  if (!(details instanceof HTMLDetailsElement) || !details.open) return;
  const template = details.querySelector(":scope > template");
  if (template) template.replaceWith(template.content);
}, true);

// Diffs: each earlier turn's diff is a <template>; the chosen one is shown.
for (const box of document.querySelectorAll(".diffs")) {
  const pick = box.querySelector("select");
  const view = box.querySelector(".diff-view");
  const show = () => {
    const chosen = box.querySelector(`template[data-against="${pick.value}"]`);
    view.replaceChildren(chosen.content.cloneNode(true));
  };
  pick.addEventListener("change", show);
  show();
}

// Filters: an element with data-fl is hidden when a chosen value differs from its data-f-NAME (elements
// without that attribute are not filtered on NAME).
const selects = [...document.querySelectorAll("select[data-filter]")];
const filterable = [...document.querySelectorAll("[data-fl]")];
function applyFilters() {
  const chosen = selects.filter((s) => s.value !== "").map((s) => [s.dataset.filter, s.value]);
  for (const el of filterable) {
    el.hidden = chosen.some(([name, value]) => {
      const own = el.getAttribute("data-f-" + name);
      return own !== null && own !== value;
    });
  }
  const shown = document.getElementById("shown");
  if (shown) {
    const chips = document.querySelectorAll("a.chip");
    shown.textContent = `${[...chips].filter((c) => !c.hidden).length} of ${chips.length} runs shown`;
  }
}
for (const s of selects) s.addEventListener("change", applyFilters);
if (selects.length) applyFilters();
