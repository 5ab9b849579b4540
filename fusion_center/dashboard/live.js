// The live page: aggregates from rase/v1/aggregates/# over MQTT-over-WebSockets
// (mqtt.js), drawn as the mean with its 95% interval band (uPlot). Served by
// `rase dashboard`, which tells it where the broker is in /config.json.
"use strict";

// One point per logical timestamp t. With wall-clock fields (t_start/t_end in
// Unix seconds, or ISO 8601 strings) the point sits in the middle of its
// period on a time axis; without them the axis is t itself.
function unixSeconds(v) {
  if (typeof v === "number" && isFinite(v)) return v;
  if (typeof v === "string") {
    const ms = Date.parse(v);
    if (!isNaN(ms)) return ms / 1000;
  }
  return null;
}

function pointOf(agg) {
  const m = agg && agg.estimates && agg.estimates.mean;
  if (!m || typeof m.value !== "number" || !Array.isArray(m.ci) || typeof agg.t !== "number") return null;
  const start = unixSeconds(agg.t_start), end = unixSeconds(agg.t_end);
  let wall = null;
  if (start !== null && end !== null) wall = (start + end) / 2;
  else if (end !== null) wall = end;
  return {
    t: agg.t, wall: wall, n: agg.n, mean: m.value, lo: m.ci[0], hi: m.ci[1],
    periodS: typeof agg.period_s === "number" ? agg.period_s : null,
    unit: agg.mechanism === "binary" ? "share on" : "W",
  };
}

class Series {
  constructor(maxPoints) {
    this.max = maxPoints;
    this.byT = new Map();
    this.axis = null;           // "time" or "t", fixed by the first point
  }

  // True when the point is new or changed (the same t arrives on
  // rase/v1/aggregates/t/{t} and on the retained .../latest).
  add(p) {
    if (this.axis === null) this.axis = p.wall !== null ? "time" : "t";
    const x = this.axis === "time" ? p.wall : p.t;
    if (x === null) return false;     // a point without wall-clock time on a time axis
    const old = this.byT.get(p.t);
    if (old && old.mean === p.mean && old.lo === p.lo && old.hi === p.hi) return false;
    this.byT.set(p.t, Object.assign({x: x}, p));
    if (this.byT.size > this.max) {
      const oldest = Math.min.apply(null, Array.from(this.byT.keys()));
      this.byT.delete(oldest);
    }
    return true;
  }

  sorted() {
    return Array.from(this.byT.values()).sort(function (a, b) { return a.x - b.x; });
  }

  columns() {
    const pts = this.sorted();
    return [pts.map(function (p) { return p.x; }), pts.map(function (p) { return p.mean; }),
            pts.map(function (p) { return p.lo; }), pts.map(function (p) { return p.hi; })];
  }
}

function fmt(v) {
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3);
}

function whenText(p) {
  return p.wall === null ? "-" : new Date(p.wall * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

// Whole steps of t for the axis (uPlot's default includes fractions).
const T_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

function utcClock(unix) {
  return new Date(unix * 1000).toISOString().slice(11, 19);
}

function makeChart(el, series, unit) {
  const blue = "#1f5fa8";
  return new uPlot({
    width: Math.max(400, el.clientWidth || 900), height: 380,
    padding: [null, 48, null, null],      // room for the last x label
    scales: {x: {time: series.axis === "time"}},
    series: [
      {label: series.axis === "time" ? "time" : "t"},
      {label: "mean (" + unit + ")", stroke: blue, width: 2, points: {show: true, size: 6}},
      {label: "95% low", stroke: "rgba(31,95,168,0.45)", width: 1, dash: [4, 4]},
      {label: "95% high", stroke: "rgba(31,95,168,0.45)", width: 1, dash: [4, 4]},
    ],
    bands: [{series: [3, 2], fill: "rgba(31,95,168,0.15)"}],
    axes: [series.axis === "time"
             ? {label: "time (UTC)", space: 90, values: function (u, splits) { return splits.map(utcClock); }}
             : {label: "logical timestamp t", space: 90, incrs: T_STEPS,
                values: function (u, splits) { return splits.map(function (v) { return String(Math.round(v)); }); }},
           {label: unit, size: 70}],
  }, series.columns(), el);
}

function setStatus(state, text) {
  const el = document.getElementById("status");
  el.dataset.state = state;
  el.textContent = text;
}

function showTable(series) {
  const body = document.querySelector("#latest tbody");
  const rows = series.sorted().slice(-8).reverse();
  body.replaceChildren.apply(body, rows.map(function (p) {
    const tr = document.createElement("tr");
    [whenText(p), String(p.t), String(p.n), fmt(p.mean), "[" + fmt(p.lo) + ", " + fmt(p.hi) + "]"]
      .forEach(function (text) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      });
    return tr;
  }));
}

function start(cfg, password) {
  const series = new Series(cfg.max_points);
  const chartEl = document.getElementById("chart");
  let chart = null, lastArrival = null, lastPoint = null;
  const opts = {protocolVersion: 4, clean: true, reconnectPeriod: 2000, connectTimeout: 10000,
                clientId: "rase-live-" + Math.random().toString(16).slice(2, 10)};
  if (cfg.username) { opts.username = cfg.username; opts.password = password; }
  const client = mqtt.connect(cfg.ws_url, opts);
  client.on("connect", function () {
    setStatus("connected", "connected to " + cfg.ws_url + "; subscribing to " + cfg.topic);
    client.subscribe(cfg.topic, {qos: 1}, function (err, granted) {
      if (err || (granted && granted.some(function (g) { return g.qos === 128; }))) {
        setStatus("error", "the broker refused the subscription to " + cfg.topic + " (its ACL)");
      } else if (lastPoint === null) {
        setStatus("subscribed", "connected to " + cfg.ws_url + "; waiting for aggregates on " + cfg.topic);
      }
    });
  });
  client.on("reconnect", function () { setStatus("connecting", "reconnecting to " + cfg.ws_url + "…"); });
  client.on("error", function (err) { setStatus("error", "broker: " + err.message); });
  client.on("message", function (topic, payload) {
    if (!payload.length) return;            // a retained message being cleared
    let agg;
    try { agg = JSON.parse(new TextDecoder().decode(payload)); } catch (e) { return; }
    const p = pointOf(agg);
    if (p === null || !series.add(p)) return;
    lastArrival = Date.now();
    lastPoint = p;
    if (chart === null) chart = makeChart(chartEl, series, p.unit);
    else chart.setData(series.columns());
    chartEl.dataset.points = String(series.byT.size);
    chartEl.dataset.axis = series.axis;
    showTable(series);
    setStatus("live", "live: newest t " + p.t + " (n = " + p.n + ")" + (p.wall !== null ? ", " + whenText(p) : ""));
  });
  // A fusion center that stops publishing is said so after three periods (as the Prometheus alert).
  setInterval(function () {
    if (lastPoint === null || lastPoint.periodS === null) return;
    const quiet = (Date.now() - lastArrival) / 1000;
    if (quiet > 3 * lastPoint.periodS) {
      setStatus("stale", "no new aggregate for " + quiet.toFixed(0) + " s (" + (quiet / lastPoint.periodS).toFixed(1) +
                " periods); newest t " + lastPoint.t);
    }
  }, 1000);
  window.addEventListener("resize", function () {
    if (chart !== null) chart.setSize({width: Math.max(400, chartEl.clientWidth), height: 380});
  });
}

fetch("config.json").then(function (r) { return r.json(); }).then(function (cfg) {
  if (!cfg.username) { start(cfg, undefined); return; }
  const form = document.getElementById("login");
  form.username.value = cfg.username;
  form.hidden = false;
  setStatus("connecting", "type the password of the broker user " + cfg.username);
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    form.hidden = true;
    start(Object.assign({}, cfg, {username: form.username.value}), form.password.value);
  });
}).catch(function (err) { setStatus("error", "cannot read config.json: " + err); });
