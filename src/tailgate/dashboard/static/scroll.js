/* Tables wider than their section scroll sideways inside it. A platform scroll bar may be an overlay that only
 * shows on hover (or none in a screenshot), which reads as a column cut off: each scroll box that overflows gets
 * a line under it saying so. Shared by the dashboard and the Keys & spend page. */
(function () {
  "use strict";

  function mark() {
    for (const box of document.querySelectorAll(".scroll")) {
      let hint = box.nextElementSibling;
      if (!hint || !hint.classList.contains("scroll-hint")) {
        hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.textContent = "wider than the window: scroll the table sideways for more columns →";
        box.after(hint);
      }
      const over = box.scrollWidth > box.clientWidth + 1;
      box.toggleAttribute("data-overflows", over);
      hint.hidden = !over;
    }
  }

  let queued = false;
  function schedule() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      mark();
    });
  }

  // Tables are rebuilt on every refresh and the window may be resized: check again after either.
  new MutationObserver(schedule).observe(document.body, { childList: true, subtree: true });
  window.addEventListener("resize", schedule);
  schedule();
})();
