// Loaded between require.js and the ipywidgets embed manager (book/_config.yml: nb_ipywidgets_js). Each part of the
// manager's bundle finds its fonts relative to its AMD module's URL ("@jupyter-widgets/controls" →
// <page folder>/@jupyter-widgets/): map the modules to the copy vendored under _static/vendor/html-manager/, where
// book/build.py put the fonts, whatever the page's depth.
(function () {
  var here = document.currentScript && document.currentScript.src;
  if (!here || !window.require || !window.require.config) return;
  var base = here.slice(0, here.lastIndexOf("/") + 1);
  window.require.config({paths: {
    "@jupyter-widgets/html-manager/dist": base + "html-manager",
    "@jupyter-widgets": base + "html-manager"
  }});
})();
