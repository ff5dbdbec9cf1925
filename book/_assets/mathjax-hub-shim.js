// The ipywidgets 8 embed manager typesets widget labels with MathJax 2's API (MathJax.Hub.Queue) whenever
// window.MathJax exists; the book loads MathJax 3, which has no Hub. Give every object assigned to window.MathJax
// (Sphinx's configuration, then MathJax 3 itself) a Hub whose Queue typesets the element with MathJax 3 once ready.
(function () {
  var current = window.MathJax;
  var hub = {
    Queue: function (cmd) {
      var el = cmd && cmd[2];
      var tries = 0;
      (function run() {
        var mj = current;
        if (mj && mj.startup && mj.startup.promise && mj.typesetPromise) {
          mj.startup.promise.then(function () { return mj.typesetPromise(el ? [el] : undefined); })
            .catch(function (e) { console.warn("MathJax typeset of a widget failed", e); });
        } else if (tries++ < 100) {
          setTimeout(run, 100);
        }
      })();
    }
  };
  function withHub(v) {
    if (v && typeof v === "object" && !v.Hub) {
      try { Object.defineProperty(v, "Hub", {value: hub, enumerable: false, configurable: true}); } catch (e) {}
    }
    return v;
  }
  withHub(current);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return current; },
    set: function (v) { current = withHub(v); }
  });
})();
