/// The dashboard's only script and style sheet, served from the tool itself (`PREFIX/static/...`): the
/// Content-Security-Policy allows scripts and styles from the dashboard's own origin and nothing else.
enum DashboardAssets {
    /// Reloads the page when the dashboard's `/events` stream says a pulled change arrived. The page
    /// works without it; with it, a change a patient synced shows within about a second.
    static let liveScript = """
        "use strict";
        (function () {
          if (document.body.dataset.live !== "on" || !window.EventSource) { return; }
          var state = document.getElementById("live-state");
          var source = new EventSource(document.body.dataset.events);
          source.addEventListener("open", function () {
            if (state) { state.textContent = "live"; }
            document.body.dataset.liveConnected = "yes";
          });
          source.addEventListener("error", function () {
            if (state) { state.textContent = "reconnecting"; }
          });
          source.addEventListener("change", function () {
            source.close();
            window.location.reload();
          });
        })();

        """

    static let styleSheet = """
        :root { color-scheme: light; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --ink: #1f2328; --muted: #59636e; }
        body { font: 15px/1.45 system-ui, sans-serif; color: var(--ink); margin: 0; background: #f6f8fa; }
        header { background: #0b3d5c; color: #fff; padding: 10px 20px; display: flex; gap: 16px; align-items: baseline; }
        header a.home { color: #fff; font-weight: 700; text-decoration: none; }
        header .who { opacity: 0.85; }
        .live-state { margin-left: auto; font-size: 13px; }
        main { padding: 16px 20px; max-width: 1100px; }
        footer { color: var(--muted); font-size: 13px; padding: 12px 20px; }
        h1 { margin: 8px 0 12px; }
        table { border-collapse: collapse; background: #fff; width: 100%; }
        th, td { border-bottom: 1px solid #d0d7de; padding: 6px 10px; text-align: left; vertical-align: top; }
        thead th { background: #eaeef2; }
        td.num { text-align: right; font-variant-numeric: tabular-nums; }
        .sort a { margin-right: 8px; }
        .sort a.current { font-weight: 700; text-decoration: none; color: var(--ink); }
        .integrity { font-weight: 600; padding: 1px 6px; border-radius: 4px; white-space: nowrap; }
        .integrity.ok { color: var(--ok); background: #dafbe1; }
        .integrity.warn { color: var(--warn); background: #fff8c5; }
        .integrity.bad { color: #fff; background: var(--bad); }
        .status .detail, .asof, .schedule { color: var(--muted); }
        .activity { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
        .activity h3 { margin: 4px 0; }
        figure.chart { margin: 8px 0; }
        figure.chart figcaption { color: var(--muted); font-size: 13px; }
        svg.chart-svg { width: 100%; max-width: 640px; height: auto; background: #fff; }
        .chart-svg .axis { stroke: #57606a; stroke-width: 1; }
        .chart-svg .grid { stroke: #d0d7de; stroke-width: 1; }
        .chart-svg .tick, .chart-svg .empty { font-size: 11px; fill: #57606a; }
        .chart-svg .target { stroke: var(--ok); stroke-dasharray: 6 4; stroke-width: 1.5; }
        .chart-svg .target-label { font-size: 11px; fill: var(--ok); }
        .chart-svg .series { fill: none; stroke: #0969da; stroke-width: 2; }
        .chart-svg .point { fill: #0969da; stroke: #fff; stroke-width: 1; }
        svg.calendar { width: 160px; height: auto; }
        .day.none, .day-key.none { fill: #eaeef2; background: #eaeef2; }
        .day.l0, .day-key.l0 { fill: #ffd8d3; background: #ffd8d3; }
        .day.l1 { fill: #fff1a8; }
        .day.l2, .day-key.l2 { fill: #aceebb; background: #aceebb; }
        .day.l4, .day-key.l4 { fill: #1a7f37; background: #1a7f37; }
        .day-key { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: middle; }
        .legend { color: var(--muted); font-size: 13px; }
        ol.marks { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px; }
        .mark { width: 22px; height: 22px; text-align: center; border-radius: 4px; }
        .mark.yes { background: #dafbe1; color: var(--ok); }
        .mark.no { background: #ffebe9; color: var(--bad); }
        .visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
        .note { color: var(--warn); }
        .note.bad { color: var(--bad); }
        @media print {
          header, .sort, .exports, .live-state { display: none; }
          body { background: #fff; }
          .activity { break-inside: avoid; }
        }

        """
}
