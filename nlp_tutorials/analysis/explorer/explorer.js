"use strict";
/*
 * Attention explorer: the script of the page nlp_tutorials.explorer writes.
 *
 * The numbers sit in the <script id="explorer-data"> element as JSON. Each example's numbers
 * are one base64 string per attention stack ("entry"): zlib-deflated bytes holding
 *   weights  uint8 [layers, heads, q_len, k_len]   weight = byte / 255
 *   queries  int8  [layers, heads, q_len, size]    value  = byte * query_scales[layer][head]
 *   keys     int8  [layers, heads, k_len, size]    value  = byte * key_scales[layer][head]
 * (queries and keys only when the export has them).
 *
 * Every view is drawn in two steps: a *scene* function turns the state into a list of plain
 * drawing items (rectangles, texts, groups of lines, images), and a renderer draws that list,
 * either onto the <canvas> (what you see, and the PNG) or as SVG text (the SVG download). So
 * the two downloads show exactly the same drawing. Each scene also carries `data`: the numbers
 * it drew, which the page puts on the canvas as `data-drawn` (JSON) for tests and scripts.
 */

const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
const MIN_LINE_BYTE = 3;       // lines under 3/255 (about 1%) are not drawn: invisible anyway
const ALPHA_BUCKETS = 16;      // lines are stroked in 16 opacity groups, one path each (fast)
const FONT = "system-ui, sans-serif";
const SEGMENT_COLOURS = ["#1f4e99", "#b35a00"];  // first and second sentence

const state = {
  example: 0, entry: DATA.entries[0], layer: 0, heads: new Set([0]), view: "head",
  query: 0,          // the query token of the neuron view
  hover: null,       // {side: "query" | "key", index} under the pointer in the head view
  pinned: false,     // a clicked token keeps its lines shown until clicked again
};
const decoded = new Map();     // example index -> Promise of its decoded arrays
const thumbnails = new Map();  // "example/entry" -> the model view's pictures
let currentScene = null;
let renders = 0;

/* ---------- decoding ---------- */

/** base64 text -> the bytes it holds, inflated with the browser's own zlib. */
async function inflate(base64) {
  const text = atob(base64);
  const packed = new Uint8Array(text.length);
  for (let k = 0; k < text.length; k++) packed[k] = text.charCodeAt(k);
  const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** One example's arrays per entry: weights (Uint8Array) and, if stored, queries and keys. */
async function decodeExample(index) {
  const example = DATA.examples[index];
  const entries = {};
  for (const entry of DATA.entries) {
    const [qAxis, kAxis] = DATA.axes[entry];
    const qLen = example[qAxis].length, kLen = example[kAxis].length;
    const packed = example.entries[entry];
    const bytes = await inflate(packed.bytes);
    const nWeights = DATA.layers * DATA.heads * qLen * kLen;
    const nQueries = DATA.layers * DATA.heads * qLen * packed.size;
    const decodedEntry = { qLen, kLen, size: packed.size, weights: bytes.subarray(0, nWeights) };
    if (packed.size) {
      // Signed bytes: the same memory read as int8.
      decodedEntry.queries = new Int8Array(bytes.buffer, nWeights, nQueries);
      decodedEntry.keys = new Int8Array(bytes.buffer, nWeights + nQueries,
                                        DATA.layers * DATA.heads * kLen * packed.size);
      decodedEntry.queryScales = packed.query_scales;
      decodedEntry.keyScales = packed.key_scales;
    }
    entries[entry] = decodedEntry;
  }
  return entries;
}

function examplePromise(index) {
  if (!decoded.has(index)) decoded.set(index, decodeExample(index));
  return decoded.get(index);
}

/** The weights of one head as a view into the decoded bytes: [q_len * k_len], row-major. */
function headWeights(arrays, layer, head) {
  const block = arrays.qLen * arrays.kLen;
  const start = (layer * DATA.heads + head) * block;
  return arrays.weights.subarray(start, start + block);
}

/** Row `row` of a head's stored vectors, dequantized: an array of `size` floats. */
function vectorRow(stored, scales, arrays, len, layer, head, row) {
  const start = ((layer * DATA.heads + head) * len + row) * arrays.size;
  const scale = scales[layer][head];
  return Array.from(stored.subarray(start, start + arrays.size), (v) => v * scale);
}

/* ---------- colours and small helpers ---------- */

function headColour(head) {
  return `hsl(${Math.round((head * 360) / DATA.heads)}, 70%, 42%)`;
}

function tokensOf(entry, side) {
  const example = DATA.examples[state.example];
  return example[DATA.axes[entry][side === "query" ? 0 : 1]];
}

/** Segment colour of a token, for GPT/BERT pairs (first or second sentence). */
function tokenColour(entry, side, index) {
  const example = DATA.examples[state.example];
  const span = example.answer?.tokens;  // a span task's answer: its first and last token
  if (span && DATA.axes[entry][side === "query" ? 0 : 1] === "src" && index >= span[0]
      && index <= span[1]) return ANSWER_COLOUR;
  if (!example.segments || DATA.axes[entry][side === "query" ? 0 : 1] !== "src") return "#222";
  return SEGMENT_COLOURS[Math.min(example.segments[index], 1)];
}

/** A diverging colour for value / peak in [-1, 1]: blue for positive, red for negative. */
function divergingColour(ratio) {
  const t = Math.min(1, Math.abs(ratio));
  const fade = (full) => Math.round(255 - (255 - full) * t);
  return ratio >= 0 ? `rgb(${fade(33)},${fade(102)},${fade(172)})`
                    : `rgb(${fade(178)},${fade(24)},${fade(43)})`;
}

function isCausal(entry) {
  return DATA.causal[entry];
}

/* ---------- head view ---------- */

/**
 * Queries on the left, keys on the right, one line per (head, query, key) whose weight is at
 * least MIN_LINE_BYTE / 255, as opaque as the weight. With a hovered or pinned token, only
 * that token's lines. Lines of one head and opacity group share one path (one stroke call).
 */
function headScene(arrays) {
  const queries = tokensOf(state.entry, "query"), keys = tokensOf(state.entry, "key");
  const rows = Math.max(queries.length, keys.length);
  // Long inputs get smaller rows and 1-pixel lines: an anti-aliased 2-pixel line costs several
  // times as much to rasterise, and a 512-token head has some 10,000 lines to draw.
  const long = rows > 120;
  const rowH = long ? 12 : 18, fontSize = rowH - 5, lineWidth = long ? 1 : 2;
  const textW = 150, gap = 300, top = 34;
  const xLeft = textW, xRight = textW + gap, width = 2 * textW + gap;
  const y = (index) => top + (index + 0.5) * rowH;
  const items = [
    { kind: "text", x: xLeft, y: 12, text: `queries · layer ${state.layer}`, size: 12,
      align: "right", colour: "#555" },
    { kind: "text", x: xRight, y: 12, text: "keys", size: 12, align: "left", colour: "#555" },
  ];
  const hover = state.hover;
  queries.forEach((token, i) => items.push(tokenItem(token, xLeft - 6, y(i), fontSize, "right",
    tokenColour(state.entry, "query", i), hover && hover.side === "query" && hover.index === i)));
  keys.forEach((token, j) => items.push(tokenItem(token, xRight + 6, y(j), fontSize, "left",
    tokenColour(state.entry, "key", j), hover && hover.side === "key" && hover.index === j)));

  const drawn = [];
  for (const head of [...state.heads].sort((a, b) => a - b)) {
    const weights = headWeights(arrays, state.layer, head);
    const groups = Array.from({ length: ALPHA_BUCKETS }, () => []);
    const [iFrom, iTo] = hover && hover.side === "query" ? [hover.index, hover.index + 1]
                                                         : [0, arrays.qLen];
    for (let i = iFrom; i < iTo; i++) {
      for (let j = 0; j < arrays.kLen; j++) {
        if (hover && hover.side === "key" && hover.index !== j) continue;
        const byte = weights[i * arrays.kLen + j];
        if (byte < MIN_LINE_BYTE) continue;
        groups[Math.min(ALPHA_BUCKETS - 1, byte >> 4)].push(xLeft + 2, y(i), xRight - 2, y(j));
        drawn.push([head, i, j, byte / DATA.weight_levels]);
      }
    }
    groups.forEach((points, bucket) => {
      if (points.length) items.push({ kind: "lines", points, colour: headColour(head),
                                      alpha: (bucket + 0.5) / ALPHA_BUCKETS, width: lineWidth });
    });
  }
  return { width, height: top + rows * rowH + 10, items, layout: { xLeft, xRight, top, rowH },
           data: { view: "head", example: state.example, entry: state.entry, layer: state.layer,
                   heads: [...state.heads].sort((a, b) => a - b), min_weight:
                   MIN_LINE_BYTE / DATA.weight_levels, lines: drawn } };
}

function tokenItem(text, x, y, size, align, colour, highlighted) {
  return { kind: "text", x, y, text, size, align, colour, bold: highlighted };
}

/** Which token (if any) the pointer at canvas position (x, y) is over, in the head view. */
function tokenAt(layout, x, y) {
  const index = Math.floor((y - layout.top) / layout.rowH);
  const side = x < (layout.xLeft + layout.xRight) / 2 ? "query" : "key";
  if (index < 0 || index >= tokensOf(state.entry, side).length) return null;
  return { side, index };
}

/* ---------- model view ---------- */

/**
 * A small picture per (layer, head): pixel (r, c) is the largest weight among the queries and
 * keys that fall into it (so a sharp pattern stays visible when 512 tokens share 72 pixels),
 * shown on a square-root scale (white 0, dark blue 1). Computed once per example and entry.
 */
function modelPictures(arrays) {
  const key = `${state.example}/${state.entry}`;
  if (thumbnails.has(key)) return thumbnails.get(key);
  const pixelsQ = Math.min(arrays.qLen, 72), pixelsK = Math.min(arrays.kLen, 72);
  const pictures = [];
  for (let layer = 0; layer < DATA.layers; layer++) {
    for (let head = 0; head < DATA.heads; head++) {
      const weights = headWeights(arrays, layer, head);
      const peak = new Uint8Array(pixelsQ * pixelsK);
      for (let i = 0; i < arrays.qLen; i++) {
        const row = Math.floor((i * pixelsQ) / arrays.qLen) * pixelsK;
        for (let j = 0; j < arrays.kLen; j++) {
          const cell = row + Math.floor((j * pixelsK) / arrays.kLen);
          const byte = weights[i * arrays.kLen + j];
          if (byte > peak[cell]) peak[cell] = byte;
        }
      }
      pictures.push({ width: pixelsK, height: pixelsQ, rgba: pictureColours(peak) });
    }
  }
  thumbnails.set(key, pictures);
  return pictures;
}

function pictureColours(peak) {
  const rgba = new Uint8ClampedArray(peak.length * 4);
  peak.forEach((byte, k) => {
    const t = Math.sqrt(byte / 255);
    rgba[4 * k] = 255 - 225 * t;
    rgba[4 * k + 1] = 255 - 185 * t;
    rgba[4 * k + 2] = 255 - 115 * t;
    rgba[4 * k + 3] = 255;
  });
  return rgba;
}

function modelScene(arrays) {
  const pictures = modelPictures(arrays);
  const cell = Math.max(48, Math.min(96, Math.floor(960 / DATA.heads)));
  const left = 64, top = 24, pad = 8;
  const importance = state.entry === "encoder" ? DATA.importance : null;
  const below = importance ? 22 : 4;  // room for the importance bar and figure
  const peak = importance ? Math.max(...importance.flat(), 1e-12) : 1;
  const items = [], cells = [];
  for (let head = 0; head < DATA.heads; head++) {
    items.push({ kind: "text", x: left + head * (cell + pad) + cell / 2, y: 12,
                 text: `head ${head}`, size: 11, align: "center", colour: headColour(head) });
  }
  for (let layer = 0; layer < DATA.layers; layer++) {
    const y0 = top + layer * (cell + pad + below);
    items.push({ kind: "text", x: left - 8, y: y0 + cell / 2, text: `layer ${layer}`,
                 size: 11, align: "right", colour: "#555" });
    for (let head = 0; head < DATA.heads; head++) {
      const x0 = left + head * (cell + pad);
      items.push({ kind: "image", x: x0, y: y0, w: cell, h: cell,
                   picture: pictures[layer * DATA.heads + head] });
      const chosen = layer === state.layer && state.heads.has(head);
      items.push({ kind: "rect", x: x0, y: y0, w: cell, h: cell, stroke: chosen ? "#d33" : "#bbb",
                   width: chosen ? 2 : 1 });
      const record = { layer, head, x: x0, y: y0, size: cell };
      if (importance) {
        record.importance = importance[layer][head];
        items.push({ kind: "rect", x: x0, y: y0 + cell + 3, h: 5, fill: "#7a3",
                     w: Math.max(1, (cell * record.importance) / peak) });
        items.push({ kind: "text", x: x0 + cell / 2, y: y0 + cell + 15, size: 10,
                     align: "center", colour: "#333", text: record.importance.toFixed(3) });
      }
      cells.push(record);
    }
  }
  const bottom = top + DATA.layers * (cell + pad + below);
  if (importance) {
    items.push({ kind: "text", x: left, y: bottom + 6, size: 11, align: "left", colour: "#555",
                 text: "green bars: each head's importance (head_importance.json)" });
  }
  return { width: left + DATA.heads * (cell + pad), height: bottom + (importance ? 16 : 0),
           items, layout: { cells },
           data: { view: "model", example: state.example, entry: state.entry,
                   has_importance: Boolean(importance), cells } };
}

/* ---------- neuron view ---------- */

/**
 * For one layer, head and query token: the query vector q, then per key token its key vector
 * k, the element-wise product q*k (whose sum, divided by sqrt(size), is the score), the score
 * and the softmax of the scores over the keys the query may see. The stored attention weight
 * is shown beside the softmax: they agree within the stated quantization error.
 */
function neuronScene(arrays) {
  if (!arrays.size) {
    return messageScene("This file has no query and key vectors (exported before they were " +
                        "saved): export again to see the neuron view.");
  }
  const head = Math.min(...state.heads), layer = state.layer;
  const query = Math.min(state.query, arrays.qLen - 1);
  const keys = tokensOf(state.entry, "key");
  const visible = isCausal(state.entry) ? Math.min(query + 1, arrays.kLen) : arrays.kLen;
  const q = vectorRow(arrays.queries, arrays.queryScales, arrays, arrays.qLen, layer, head, query);
  const ks = [], products = [], scores = [];
  for (let j = 0; j < visible; j++) {
    const k = vectorRow(arrays.keys, arrays.keyScales, arrays, arrays.kLen, layer, head, j);
    const product = k.map((v, d) => v * q[d]);
    ks.push(k);
    products.push(product);
    scores.push(product.reduce((a, b) => a + b, 0) / Math.sqrt(arrays.size));
  }
  const top = Math.max(...scores);
  const exps = scores.map((s) => Math.exp(s - top));
  const total = exps.reduce((a, b) => a + b, 0);
  const softmax = exps.map((e) => e / total);
  const weights = headWeights(arrays, layer, head);
  const stored = scores.map((_, j) => weights[query * arrays.kLen + j] / DATA.weight_levels);
  const items = neuronItems(arrays.size, tokensOf(state.entry, "query")[query], keys, q, ks,
                            products, scores, softmax, stored);
  return { ...items, data: { view: "neuron", example: state.example, entry: state.entry,
                             layer, head, query, size: arrays.size, q, keys: ks, products,
                             scores, softmax, weights: stored } };
}

function neuronItems(size, queryToken, keys, q, ks, products, scores, softmax, stored) {
  const cellW = Math.max(3, Math.min(10, Math.floor(320 / size)));
  // Each block is at least as wide as its heading.
  const rowH = 14, labelW = 130, top = 56, blockW = Math.max(size * cellW, 130);
  const xK = labelW + 8, xP = xK + blockW + 24, xS = xP + blockW + 24;
  const items = [
    { kind: "text", x: xK, y: 10, text: `key k`, size: 11, align: "left", colour: "#555" },
    { kind: "text", x: xP, y: 10, text: `q × k (element-wise)`, size: 11, align: "left",
      colour: "#555" },
    { kind: "text", x: xS, y: 10, text: "score = Σ q×k / √d   softmax   (stored)", size: 11,
      align: "left", colour: "#555" },
    { kind: "text", x: labelW, y: 30, text: `query q: ${queryToken}`, size: 11, align: "right",
      colour: "#222", bold: true },
  ];
  const peakOf = (rows) => Math.max(1e-12, ...rows.map((row) => Math.max(...row.map(Math.abs))));
  const qPeak = peakOf([q]), kPeak = peakOf(ks), pPeak = peakOf(products);
  cellsRow(items, q, qPeak, xK, 24, cellW, 12);
  ks.forEach((k, j) => {
    const y = top + j * rowH;
    items.push({ kind: "text", x: labelW, y: y + 6, text: keys[j], size: 10, align: "right",
                 colour: tokenColour(state.entry, "key", j) });
    cellsRow(items, k, kPeak, xK, y, cellW, rowH - 2);
    cellsRow(items, products[j], pPeak, xP, y, cellW, rowH - 2);
    items.push({ kind: "rect", x: xS + 150, y: y + 2, w: Math.max(1, 100 * softmax[j]), h: 8,
                 fill: headColour(Math.min(...state.heads)) });
    items.push({ kind: "text", x: xS, y: y + 6, size: 10, align: "left", colour: "#222",
                 text: `${scores[j].toFixed(2)}   ${softmax[j].toFixed(3)}  ` +
                       `(${stored[j].toFixed(3)})` });
  });
  return { width: xS + 260, height: top + ks.length * rowH + 8, items, layout: {} };
}

/** One row of coloured cells, one per component (blue positive, red negative). */
function cellsRow(items, values, peak, x, y, cellW, h) {
  values.forEach((value, d) => items.push({ kind: "rect", x: x + d * cellW, y, w: cellW - 1, h,
                                            fill: divergingColour(value / peak) }));
}

function messageScene(text) {
  return { width: 760, height: 60, layout: {}, data: { view: state.view, message: text },
           items: [{ kind: "text", x: 10, y: 30, text, size: 13, align: "left", colour: "#a33" }] };
}

/* ---------- renderers: the same scene onto the canvas or into SVG ---------- */

function pictureCanvas(picture) {
  if (!picture.canvas) {
    picture.canvas = document.createElement("canvas");
    picture.canvas.width = picture.width;
    picture.canvas.height = picture.height;
    picture.canvas.getContext("2d").putImageData(
      new ImageData(picture.rgba, picture.width, picture.height), 0, 0);
  }
  return picture.canvas;
}

const CANVAS_DRAW = {
  rect(ctx, item) {
    if (item.fill) {
      ctx.fillStyle = item.fill;
      ctx.fillRect(item.x, item.y, item.w, item.h);
    }
    if (item.stroke) {
      ctx.strokeStyle = item.stroke;
      ctx.lineWidth = item.width;
      ctx.strokeRect(item.x, item.y, item.w, item.h);
    }
  },
  text(ctx, item) {
    ctx.font = `${item.bold ? "bold " : ""}${item.size}px ${FONT}`;
    ctx.fillStyle = item.colour;
    ctx.textAlign = item.align;
    ctx.textBaseline = "middle";
    ctx.fillText(item.text, item.x, item.y);
  },
  lines(ctx, item) {
    ctx.globalAlpha = item.alpha;
    ctx.strokeStyle = item.colour;
    ctx.lineWidth = item.width;
    ctx.beginPath();
    const p = item.points;
    for (let k = 0; k < p.length; k += 4) {
      ctx.moveTo(p[k], p[k + 1]);
      ctx.lineTo(p[k + 2], p[k + 3]);
    }
    ctx.stroke();
    ctx.globalAlpha = 1;
  },
  image(ctx, item) {
    ctx.imageSmoothingEnabled = false;  // one weight per pixel block, not a blur
    ctx.drawImage(pictureCanvas(item.picture), item.x, item.y, item.w, item.h);
  },
};

function renderCanvas(scene, canvas) {
  canvas.width = scene.width;
  canvas.height = scene.height;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, scene.width, scene.height);
  for (const item of scene.items) CANVAS_DRAW[item.kind](ctx, item);
}

function escapeXml(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                   '"': "&quot;" })[c]);
}

const SVG_ANCHOR = { left: "start", right: "end", center: "middle" };
const SVG_DRAW = {
  rect: (item) => `<rect x="${item.x}" y="${item.y}" width="${item.w}" height="${item.h}" ` +
    (item.fill ? `fill="${item.fill}"` : `fill="none"`) +
    (item.stroke ? ` stroke="${item.stroke}" stroke-width="${item.width}"` : "") + "/>",
  text: (item) => `<text x="${item.x}" y="${item.y}" font-size="${item.size}" ` +
    `font-family="${FONT}" fill="${item.colour}" text-anchor="${SVG_ANCHOR[item.align]}" ` +
    `dominant-baseline="central"${item.bold ? ' font-weight="bold"' : ""}>` +
    `${escapeXml(item.text)}</text>`,
  lines(item) {
    const p = item.points, d = [];
    for (let k = 0; k < p.length; k += 4) d.push(`M${p[k]} ${p[k + 1]}L${p[k + 2]} ${p[k + 3]}`);
    return `<path d="${d.join("")}" stroke="${item.colour}" stroke-opacity="${item.alpha}" ` +
      `stroke-width="${item.width}" fill="none"/>`;
  },
  image: (item) => `<image x="${item.x}" y="${item.y}" width="${item.w}" height="${item.h}" ` +
    `preserveAspectRatio="none" style="image-rendering:pixelated" ` +
    `href="${pictureCanvas(item.picture).toDataURL("image/png")}"/>`,
};

function renderSVG(scene) {
  const body = scene.items.map((item) => SVG_DRAW[item.kind](item)).join("\n");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${scene.width}" ` +
    `height="${scene.height}" viewBox="0 0 ${scene.width} ${scene.height}">\n` +
    `<rect width="100%" height="100%" fill="#fff"/>\n${body}\n</svg>\n`;
}

/* ---------- state, controls and drawing ---------- */

const SCENES = { head: headScene, model: modelScene, neuron: neuronScene };
const HELP = {
  head: "Lines join each query (left) to the keys (right) it attends to, as opaque as the " +
        "weight. Hover a token to see only its lines; click it to pin them (and to pick it " +
        "for the neuron view). Toggle heads with the coloured chips.",
  model: "Every layer × head: darker = more attention (square-root scale; each pixel shows " +
         "the largest weight it covers). Click a picture to open that head in the head view.",
  neuron: "How the attention of one query token arises: q · k / √d for every key, then a " +
          "softmax. Blue cells are positive, red negative. Chips pick the head.",
};

/** Draw the current state (the example's arrays must be decoded). */
async function draw() {
  const arrays = (await examplePromise(state.example))[state.entry];
  currentScene = SCENES[state.view](arrays);
  const canvas = document.getElementById("view");
  renderCanvas(currentScene, canvas);
  canvas.dataset.drawn = JSON.stringify(currentScene.data);
  canvas.dataset.renders = String(++renders);
  syncControls();
}

const ANSWER_COLOUR = "#1a7f37";  // the tokens of a span task's answer

/**
 * A fine-tuned model's answer to the example, as Task.shown_answer gives it: a label and its
 * probability, a score, tags under the tokens ("token/TAG"), or an answer text; "" if none.
 */
function answerText(example) {
  const answer = example.answer;
  if (!answer) return "";
  if (answer.score !== undefined) return `Model's score: ${answer.score.toFixed(3)}`;
  if (answer.label !== undefined) {
    return `Model's answer: ${answer.label} (probability ${answer.probability.toFixed(3)})`;
  }
  if (answer.tags) {
    const tagged = example.src.map((token, i) => (answer.tags[i] ? `${token}/${answer.tags[i]}`
                                                                 : null));
    return `Model's tags: ${tagged.filter(Boolean).join(" ")}`;
  }
  return answer.answer !== undefined ? `Model's answer: “${answer.answer}”` : "";
}

function syncControls() {
  for (const button of document.querySelectorAll(".tabs button")) {
    button.setAttribute("aria-selected", String(button.dataset.view === state.view));
  }
  for (const chip of document.querySelectorAll(".chip")) {
    chip.setAttribute("aria-pressed", String(state.heads.has(Number(chip.dataset.head))));
  }
  document.getElementById("example").value = String(state.example);
  document.getElementById("entry").value = state.entry;
  document.getElementById("layer").value = String(state.layer);
  document.getElementById("query-label").hidden = state.view !== "neuron";
  document.getElementById("query").value = String(state.query);
  document.getElementById("help").textContent = HELP[state.view];
  const answer = document.getElementById("answer");
  answer.textContent = answerText(DATA.examples[state.example]);
  answer.hidden = !answer.textContent;
}

function fillSelect(select, labels) {
  select.replaceChildren(...labels.map((label, index) => new Option(label, String(index))));
}

function fillQueryTokens() {
  const select = document.getElementById("query");
  const tokens = tokensOf(state.entry, "query");
  fillSelect(select, tokens.map((token, i) => `${i}: ${token}`));
  state.query = Math.min(state.query, tokens.length - 1);
}

function exampleLabel(example, index) {
  const words = example.src.slice(0, 12).join(" ");
  return `${index}: ${words}${example.src.length > 12 ? " …" : ""} (${example.src.length} tokens)`;
}

function buildControls() {
  fillSelect(document.getElementById("example"), DATA.examples.map(exampleLabel));
  const entry = document.getElementById("entry");
  entry.replaceChildren(...DATA.entries.map((name) => new Option(ENTRY_NAMES[name], name)));
  document.getElementById("entry-label").hidden = DATA.entries.length === 1;
  fillSelect(document.getElementById("layer"),
             Array.from({ length: DATA.layers }, (_, i) => `${i}`));
  const chips = document.getElementById("chips");
  for (let head = 0; head < DATA.heads; head++) {
    const chip = document.createElement("button");
    chip.type = "button";
    chip.className = "chip";
    chip.dataset.head = String(head);
    chip.style.setProperty("--head-colour", headColour(head));
    chip.textContent = `head ${head}`;
    chips.append(chip);
  }
  document.getElementById("note").textContent = DATA.note;
}

const ENTRY_NAMES = { encoder: "encoder self-attention", decoder: "decoder self-attention",
                      encoder_decoder: "cross-attention (decoder → encoder)" };

/** The public handle, for scripts and tests: set the state, then await the redraw. */
const explorer = {
  state, draw,
  scene: () => currentScene,
  svg: () => renderSVG(currentScene),
  async setExample(index) {
    state.example = index;
    state.hover = null;
    state.pinned = false;
    fillQueryTokens();
    await draw();
  },
  async setEntry(name) {
    state.entry = name;
    state.hover = null;
    fillQueryTokens();
    await draw();
  },
  async setLayer(layer) { state.layer = layer; await draw(); },
  async setView(view) {
    state.view = view;
    if (view === "neuron") state.heads = new Set([Math.min(...state.heads)]);
    await draw();
  },
  async setHeads(heads) { state.heads = new Set(heads); await draw(); },
  async setQuery(index) { state.query = index; await draw(); },
};
window.explorer = explorer;

function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function fileStem() {
  return `${DATA.model}_${state.view}_example${state.example}_layer${state.layer}`;
}

function onChipClick(head) {
  if (state.view === "neuron") return explorer.setHeads([head]);  // one head at a time there
  const heads = new Set(state.heads);
  if (heads.has(head)) heads.delete(head); else heads.add(head);
  return explorer.setHeads([...heads]);
}

function onCanvasMove(event) {
  if (state.view !== "head" || state.pinned) return;
  const found = tokenAt(currentScene.layout, event.offsetX, event.offsetY);
  const same = JSON.stringify(found) === JSON.stringify(state.hover);
  if (!same) { state.hover = found; draw(); }
}

function onCanvasClick(event) {
  const { offsetX: x, offsetY: y } = event;
  if (state.view === "model") {
    const cell = currentScene.layout.cells.find((c) => x >= c.x && x < c.x + c.size &&
                                                       y >= c.y && y < c.y + c.size);
    if (cell) {
      state.layer = cell.layer;
      state.heads = new Set([cell.head]);
      explorer.setView("head");
    }
  } else if (state.view === "head") {
    const found = tokenAt(currentScene.layout, x, y);
    state.pinned = Boolean(found) && !state.pinned;
    state.hover = found;
    if (found && found.side === "query") state.query = found.index;
    draw();
  }
}

function wireControls() {
  const on = (id, type, handler) => document.getElementById(id).addEventListener(type, handler);
  on("example", "change", (e) => explorer.setExample(Number(e.target.value)));
  on("entry", "change", (e) => explorer.setEntry(e.target.value));
  on("layer", "change", (e) => explorer.setLayer(Number(e.target.value)));
  on("query", "change", (e) => explorer.setQuery(Number(e.target.value)));
  on("chips", "click", (e) => e.target.dataset.head && onChipClick(Number(e.target.dataset.head)));
  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", () => explorer.setView(button.dataset.view));
  }
  const canvas = document.getElementById("view");
  canvas.addEventListener("mousemove", onCanvasMove);
  canvas.addEventListener("mouseleave", () => {
    if (!state.pinned && state.hover) { state.hover = null; draw(); }
  });
  canvas.addEventListener("click", onCanvasClick);
  on("save-png", "click", () => canvas.toBlob((blob) => download(`${fileStem()}.png`, blob)));
  on("save-svg", "click", () => download(`${fileStem()}.svg`,
    new Blob([renderSVG(currentScene)], { type: "image/svg+xml" })));
}

async function start() {
  const initial = DATA.initial;
  state.example = initial.example ?? 0;
  state.layer = initial.layer ?? 0;
  state.heads = new Set([initial.head ?? 0]);
  state.view = initial.view ?? "head";
  buildControls();
  wireControls();
  fillQueryTokens();
  await draw();
  // Ready once the first drawing is on screen: the frame after it was drawn.
  await new Promise((resolve) => requestAnimationFrame(resolve));
  explorer.readyAt = performance.now();  // ms since navigation began (the benchmark reads it)
  document.body.dataset.ready = "true";
}

start();
