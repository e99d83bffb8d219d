// The playground: plain JavaScript, no build step, no dependency. Everything the service or a
// document says is written with textContent (never parsed as HTML): a stored document or a model's
// answer is text here, whatever it holds. Requests go to this page's own origin only (the
// page's Content-Security-Policy says connect-src 'self').

const $ = (id) => document.getElementById(id);
const CREDENTIAL = "serve-app.credential"; // sessionStorage: this tab only, never in a URL
const STRATEGY_NAMES = { dense: "dense", splade: "SPLADE", bm25: "BM25" };
const STOP_WORDS = new Set(
  ("the a an and or but of in on at to for from by with as is are was were be been it its " +
   "this that these those what which who whom how when where why does do did can could " +
   "should would will not no than then there their about into over under").split(" "),
);

// --- elements and text -------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

function say(id, text, kind = "") {
  const node = $(id);
  node.textContent = text;
  node.className = `message ${kind}`;
}

const ms = (value) => `${Number(value).toFixed(value < 10 ? 1 : 0)} ms`;

// --- requests ----------------------------------------------------------------------------

function headers(extra = {}) {
  const credential = sessionStorage.getItem(CREDENTIAL);
  return credential ? { ...extra, Authorization: `Bearer ${credential}` } : { ...extra };
}

function collectionBase() {
  const name = $("collection").value;
  return name ? `v1/collections/${encodeURIComponent(name)}/` : "v1/";
}

class ApiError extends Error {
  constructor(status, body, requestId) {
    const error = (body && body.error) || {};
    const code = error.code || `HTTP_${status}`;
    const message = error.message || "the service gave no reason";
    super(status ? `${status} ${code}: ${message}` : `${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.requestId = error.request_id || requestId || "";
  }

  describe() {
    const hint =
      this.status === 401 ? " (check the API key or token above)"
      : this.status === 403 ? " (this credential may not do that)" : "";
    const id = this.requestId ? ` [request ${this.requestId}]` : "";
    return `${this.message}${hint}${id}`;
  }
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: a proxy's page; the status says enough
  }
  return new ApiError(response.status, body, response.headers.get("X-Request-ID"));
}

async function call(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.json();
}

function describe(error) {
  return error instanceof ApiError ? error.describe() : `the request failed: ${error.message}`;
}

// --- readiness and credentials ---------------------------------------------------------------

async function checkReadiness() {
  let next = 30000;
  try {
    const response = await fetch("readyz");
    const state = await response.json();
    const waiting = Object.entries(state.checks || {}).filter(([, v]) => v !== "ok");
    if (state.ready) {
      const note = waiting.length ? ` (${waiting.map(([k, v]) => `${k} ${v}`).join(", ")})` : "";
      say("readiness", `ready${note}`, "ok");
    } else {
      say("readiness", `starting: ${waiting.map(([k, v]) => `${k} ${v}`).join(", ")}`, "warn");
      next = 3000;
    }
  } catch {
    say("readiness", "the service does not answer", "error");
    next = 3000;
  }
  setTimeout(checkReadiness, next);
}

function setupCredentials() {
  const input = $("credential");
  input.value = sessionStorage.getItem(CREDENTIAL) || "";
  $("credentials").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (value) sessionStorage.setItem(CREDENTIAL, value);
    else sessionStorage.removeItem(CREDENTIAL);
    loadCollections();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(CREDENTIAL);
    input.value = "";
    $("principal").textContent = "";
    loadCollections();
  });
}

// --- collections and documents --------------------------------------------------------------

async function loadCollections() {
  const select = $("collection");
  const chosen = select.value;
  try {
    const { collections, tenant, principal, scopes } = await call("GET", "v1/collections");
    $("principal").textContent = `${principal} · tenant ${tenant} · ${scopes.join(", ")}`;
    select.replaceChildren(el("option", { value: "", text: "default" }));
    for (const c of collections) {
      if (c.name === "default") continue;
      const label = c.state === "ready" ? c.name : `${c.name} (${c.state})`;
      select.append(el("option", { value: c.name, text: label }));
    }
    select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
    say("collection-message", "");
  } catch (error) {
    $("principal").textContent = "";
    say("collection-message", describe(error), "error");
  }
}

function setupCollections() {
  $("refresh-collections").addEventListener("click", loadCollections);
  $("create-collection").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = $("new-collection").value.trim();
    try {
      await call("POST", "v1/collections", { name });
      await loadCollections();
      $("collection").value = name;
      $("new-collection").value = "";
      say("collection-message", `created ${name}`, "ok");
      await loadDocuments();
    } catch (error) {
      say("collection-message", describe(error), "error");
    }
  });
  $("delete-collection").addEventListener("click", async () => {
    const name = $("collection").value;
    if (!name) {
      say("collection-message", "the default collection cannot be deleted", "error");
      return;
    }
    try {
      const done = await call("DELETE", `v1/collections/${encodeURIComponent(name)}`);
      await loadCollections();
      say("collection-message", `deleted ${name} (${done.chunks_removed} chunks)`, "ok");
      await loadDocuments();
    } catch (error) {
      say("collection-message", describe(error), "error");
    }
  });
  $("document-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    await showDocument();
  });
  $("delete-document").addEventListener("click", deleteDocument);
  $("more-documents").addEventListener("click", () => loadDocuments(true));
  $("collection").addEventListener("change", () => loadDocuments());
}

let documentsCursor = null; // where the next page of the list starts (null: no more)

async function loadDocuments(more = false) {
  const rows = $("documents").tBodies[0];
  const query = new URLSearchParams({ limit: "50" });
  if (more && documentsCursor) query.set("cursor", documentsCursor);
  try {
    const page = await call("GET", `${collectionBase()}documents?${query}`);
    if (!more) rows.replaceChildren();
    rows.append(...page.documents.map(documentRow));
    documentsCursor = page.next_cursor;
    $("more-documents").hidden = !documentsCursor;
    say("documents-message", rows.rows.length ? "" : "no documents in this collection yet");
  } catch (error) {
    if (!more) rows.replaceChildren();
    say("documents-message", describe(error), "error");
  }
}

function documentRow(doc) {
  const show = el("button", { type: "button", text: "Show", "aria-label": `show ${doc.id}` });
  const remove = el("button", { type: "button", text: "Delete", "aria-label": `delete ${doc.id}` });
  show.addEventListener("click", () => {
    $("document-id").value = doc.id;
    showDocument();
  });
  remove.addEventListener("click", () => {
    $("document-id").value = doc.id;
    deleteDocument();
  });
  return el("tr", {},
    el("td", { text: doc.title || "(untitled)" }), el("td", { class: "mono", text: doc.id }),
    el("td", { text: String(doc.chunk_count) }), el("td", { class: "actions" }, show, remove));
}

function documentPath() {
  return `${collectionBase()}documents/${encodeURIComponent($("document-id").value.trim())}`;
}

async function showDocument() {
  const view = $("document");
  try {
    const doc = await call("GET", documentPath());
    view.replaceChildren(
      el("h4", { text: doc.title || doc.id }),
      el("p", { class: "muted", text: `${doc.id} · ${doc.chunk_ids.length} chunks` +
        (doc.source ? ` · ${doc.source}` : "") }),
      metadataList(doc.metadata),
    );
  } catch (error) {
    view.replaceChildren(el("p", { class: "message error", text: describe(error) }));
  }
}

async function deleteDocument() {
  const view = $("document");
  try {
    const done = await call("DELETE", documentPath());
    view.replaceChildren(el("p", { class: "message ok",
      text: `deleted ${done.deleted} (${done.chunks_removed} chunks)` }));
    await loadDocuments();
  } catch (error) {
    view.replaceChildren(el("p", { class: "message error", text: describe(error) }));
  }
}

function metadataList(metadata) {
  const list = el("dl", { class: "metadata" });
  for (const [key, value] of Object.entries(metadata || {})) {
    list.append(el("dt", { text: key }), el("dd", { text: JSON.stringify(value) }));
  }
  return list;
}

// --- uploads: one request per file, so each has its own progress and result -----------------

function upload(file, row) {
  const bar = row.querySelector("progress");
  const status = row.querySelector(".result");
  return new Promise((resolve) => {
    const request = new XMLHttpRequest();
    request.open("POST", `${collectionBase()}documents`);
    for (const [name, value] of Object.entries(headers())) request.setRequestHeader(name, value);
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) bar.value = Math.round((100 * event.loaded) / event.total);
    });
    request.addEventListener("load", () => {
      bar.value = 100;
      let body = null;
      try {
        body = JSON.parse(request.responseText);
      } catch {
        // a proxy's page
      }
      if (request.status === 200 && body) {
        const written = body.written.length ? "written" : "unchanged";
        status.textContent = `${written} (${body.chunks_written} chunks)`;
        row.dataset.outcome = written;
      } else {
        const error = new ApiError(request.status, body, request.getResponseHeader("X-Request-ID"));
        status.textContent = `refused: ${error.describe()}`;
        row.dataset.outcome = "refused";
      }
      resolve();
    });
    request.addEventListener("error", () => {
      status.textContent = "the connection failed";
      row.dataset.outcome = "failed";
      resolve();
    });
    const form = new FormData();
    form.append("files", file, file.name);
    request.send(form);
  });
}

async function uploadAll(files) {
  const list = $("uploads");
  const rows = [...files].map((file) => {
    const bar = el("progress", { max: "100", value: "0", "aria-label": `upload of ${file.name}` });
    const row = el("li", {}, el("span", { class: "name", text: file.name }), bar,
      el("span", { class: "result", text: "waiting" }));
    list.append(row);
    return [file, row];
  });
  const queue = [...rows];
  const worker = async () => {
    while (queue.length) {
      const [file, row] = queue.shift();
      row.querySelector(".result").textContent = "uploading";
      await upload(file, row);
    }
  };
  await Promise.all([worker(), worker()]);
  await loadDocuments();
}

function setupUploads() {
  const zone = $("drop");
  $("files").addEventListener("change", (event) => {
    uploadAll(event.target.files);
    event.target.value = "";
  });
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer.files.length) uploadAll(event.dataTransfer.files);
  });
}

// --- search --------------------------------------------------------------------------------

function queryTerms(query) {
  const words = query.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];
  return new Set(words.filter((w) => w.length > 2 && !STOP_WORDS.has(w)));
}

function matches(word, terms) {
  const lower = word.toLowerCase();
  if (terms.has(lower)) return true;
  for (const term of terms) {
    if (term.length >= 4 && (lower.startsWith(term) || term.startsWith(lower) && lower.length >= 4)) {
      return true;
    }
  }
  return false;
}

// The passage as text nodes, with the query's words in <mark>.
function markedText(text, terms) {
  const fragment = document.createDocumentFragment();
  let last = 0;
  for (const found of text.matchAll(/[\p{L}\p{N}]+/gu)) {
    if (!matches(found[0], terms)) continue;
    if (found.index > last) fragment.append(text.slice(last, found.index));
    fragment.append(el("mark", { text: found[0] }));
    last = found.index + found[0].length;
  }
  fragment.append(text.slice(last));
  return fragment;
}

function splitList(value) {
  return value.split(",").map((v) => v.trim()).filter(Boolean);
}

function searchBody() {
  const body = { query: $("query").value, top_k: Number($("top-k").value) || 10 };
  const strategies = [...document.querySelectorAll("input[name=strategy]:checked")]
    .map((box) => box.value);
  body.strategies = strategies;
  const method = $("fusion").value;
  if (method) {
    body.fusion = { method };
    const weights = {};
    for (const s of strategies) {
      const value = $(`w-${s}`).value;
      if (value !== "") weights[s] = Number(value);
    }
    if (Object.keys(weights).length) body.fusion.weights = weights;
  }
  if ($("rerank").checked) body.rerank = true;
  const filters = {};
  const ids = splitList($("doc-ids").value);
  if (ids.length) filters.doc_ids = ids;
  const sections = splitList($("sections").value);
  if (sections.length) filters.sections = sections;
  const metadata = {};
  for (const pair of splitList($("metadata-filter").value)) {
    const [key, ...rest] = pair.split("=");
    if (key && rest.length) metadata[key.trim()] = rest.join("=").trim();
  }
  if (Object.keys(metadata).length) filters.metadata = metadata;
  if (Object.keys(filters).length) body.filters = filters;
  return body;
}

function breakdown(hit, strategies) {
  const table = el("table", { class: "breakdown" },
    el("caption", { text: `Why it ranks here: fused score ${hit.fused_score.toFixed(4)}` }),
    el("thead", {}, el("tr", {}, ...["strategy", "rank", "score", "share of fused score"]
      .map((h) => el("th", { scope: "col", text: h })))));
  const body = el("tbody");
  const total = hit.fused_score || 1;
  for (const strategy of strategies) {
    const share = hit.contributions[strategy] || 0;
    const rank = hit.ranks[strategy];
    const percent = Math.round((100 * share) / total);
    body.append(el("tr", { "data-strategy": strategy },
      el("th", { scope: "row", text: STRATEGY_NAMES[strategy] || strategy }),
      el("td", { class: "rank", text: rank ? `#${rank}` : "not found" }),
      el("td", { text: strategy in hit.scores ? hit.scores[strategy].toFixed(3) : "–" }),
      el("td", {},
        el("meter", { min: "0", max: String(total), value: String(share),
          "aria-label": `${STRATEGY_NAMES[strategy] || strategy} share` }),
        el("span", { class: "share", text: ` ${percent}%` }))));
  }
  table.append(body);
  return table;
}

function renderHit(hit, index, strategies, terms) {
  const chain = [hit.section, ...hit.heading_chain.filter((h) => h !== hit.section)]
    .filter(Boolean).join(" › ");
  const score = hit.rerank_score === null ? "" : ` · rerank ${hit.rerank_score.toFixed(3)}`;
  return el("li", { class: "hit", "data-chunk": hit.chunk_id },
    el("h3", { class: "title" }, el("span", { class: "position", text: `${index + 1}.` }),
      ` ${hit.title || hit.doc_id}`),
    el("p", { class: "where muted", text: `${hit.doc_id}${chain ? ` · ${chain}` : ""}${score}` }),
    passage(hit.text, terms),
    breakdown(hit, strategies));
}

// A long passage shows its first lines until asked for the rest.
function passage(text, terms) {
  const body = el("p", { class: "passage clamped" }, markedText(text, terms));
  if (text.length < 600) {
    body.classList.remove("clamped");
    return body;
  }
  const toggle = el("button", { type: "button", class: "more", "aria-expanded": "false",
    text: "show all" });
  toggle.addEventListener("click", () => {
    const open = body.classList.toggle("clamped") === false;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "show less" : "show all";
  });
  const wrap = document.createDocumentFragment();
  wrap.append(body, toggle);
  return wrap;
}

function renderTimings(timings) {
  $("timings").replaceChildren(...Object.entries(timings).flatMap(([stage, value]) => [
    el("dt", { text: stage }), el("dd", { text: ms(value) }),
  ]));
}

async function search(event) {
  event.preventDefault();
  const body = searchBody();
  if (!body.strategies.length) {
    say("search-message", "choose at least one strategy", "error");
    return;
  }
  say("search-message", "searching…");
  try {
    const response = await call("POST", `${collectionBase()}search`, body);
    const terms = queryTerms(body.query);
    $("results").replaceChildren(
      ...response.results.map((hit, i) => renderHit(hit, i, response.strategies, terms)));
    renderTimings(response.timings_ms);
    say("search-message", `${response.results.length} of ${response.total} fused candidates ` +
      `(${response.fusion}${response.reranked ? ", reranked" : ""})`, "ok");
  } catch (error) {
    $("results").replaceChildren();
    say("search-message", describe(error), "error");
  }
}

// --- answers: the service's own Server-Sent Events, read from a fetch -----------------------

let answering = null;

async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue; // a heartbeat
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield [name, JSON.parse(data.join("\n"))];
    }
  }
}

function renderPassages(results) {
  $("passages").replaceChildren(...results.map((p) => el("li",
    { id: `passage-${p.passage}`, class: "passage-card", tabindex: "-1", "data-passage": p.passage },
    el("h4", { text: `[${p.passage}] ${p.title || p.doc_id}` }),
    el("p", { class: "muted", text: [p.doc_id, p.section].filter(Boolean).join(" · ") +
      (p.found_by && p.found_by.length ? ` · found by ${p.found_by.join(", ")}` : "") }),
    el("p", { class: "passage-text", text: p.text }))));
}

function renderUnderstood(metadata) {
  const parts = [];
  if (metadata.sub_queries && metadata.sub_queries.length > 1) {
    parts.push(el("p", {}, el("strong", { text: "Searched as: " }),
      metadata.sub_queries.join(" · ")));
  } else if (metadata.semantic_query && metadata.semantic_query !== metadata.question) {
    parts.push(el("p", {}, el("strong", { text: "Searched as: " }), metadata.semantic_query));
  }
  if (metadata.filters) {
    const source = metadata.filters_source === "understanding" ? " (understood from the question)" : "";
    parts.push(el("p", {}, el("strong", { text: `Filters${source}: ` }),
      JSON.stringify(metadata.filters)));
  }
  $("understood").replaceChildren(...parts);
}

// The sentence of the passage the server found the claim rests on (span_start, span_end).
function highlight(citation) {
  for (const card of document.querySelectorAll(".passage-card")) {
    card.classList.remove("active");
    const text = card.querySelector(".passage-text");
    text.textContent = text.textContent; // drops an earlier highlight
  }
  const card = $(`passage-${citation.number}`);
  if (!card) return;
  const text = card.querySelector(".passage-text");
  const whole = text.textContent;
  const [start, end] = [citation.span_start, citation.span_end];
  text.replaceChildren(whole.slice(0, start), el("mark", { class: "cited", text: whole.slice(start, end) }),
    whole.slice(end));
  card.classList.add("active");
  card.scrollIntoView({ block: "center" });
  card.focus({ preventScroll: true });
}

function renderAnswer(done) {
  const answer = done.answer;
  const flags = [
    ...done.uncited_sentences.map((s) => ({ ...s, kind: "uncited", why: "no citation" })),
    ...done.unsupported_sentences.map((s) => ({ ...s, kind: "unsupported",
      why: "its citations do not support it" })),
  ];
  const marks = new Map();
  for (const c of done.citations) {
    if (!marks.has(c.at)) marks.set(c.at, []);
    marks.get(c.at).push(c);
  }
  const cuts = new Set([0, answer.length]);
  for (const f of flags) cuts.add(f.start).add(f.end ?? answer.length);
  for (const [at, cited] of marks) cuts.add(at).add(at + cited[0].mark.length);
  const points = [...cuts].filter((p) => p >= 0 && p <= answer.length).sort((a, b) => a - b);
  const node = $("answer");
  node.replaceChildren();
  for (let i = 0; i + 1 < points.length; i++) {
    const [from, to] = [points[i], points[i + 1]];
    const cited = marks.get(from);
    if (cited && to === from + cited[0].mark.length) {
      for (const c of cited) {
        const link = el("a", { href: `#passage-${c.number}`, class: c.supported ? "cite" : "cite weak",
          title: `passage ${c.number}, support ${Math.round(100 * c.support)}%`, text: `[${c.number}]` });
        link.addEventListener("click", (event) => {
          event.preventDefault();
          highlight(c);
        });
        node.append(link);
      }
      continue;
    }
    const flag = flags.find((f) => f.start <= from && to <= (f.end ?? answer.length));
    node.append(flag ? el("span", { class: flag.kind, title: flag.why, text: answer.slice(from, to) })
      : answer.slice(from, to));
  }
  const invalid = done.invalid_citations.length ? ` · ${done.invalid_citations.length} invalid citation marks` : "";
  const early = done.early_return ? ` · no answer: ${done.early_return.replace("_", " ")}` : "";
  say("answer-message", `done in ${ms(done.timings_ms.total || 0)}${early}${invalid}`, "ok");
}

async function ask(event) {
  event.preventDefault();
  if (answering) answering.abort();
  answering = new AbortController();
  $("stop-answer").disabled = false;
  $("answer").replaceChildren();
  $("passages").replaceChildren();
  $("understood").replaceChildren();
  say("answer-message", "searching and reading…");
  try {
    const response = await fetch(`${collectionBase()}answer`, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify({ question: $("question").value }),
      signal: answering.signal,
    });
    if (!response.ok) throw await failure(response);
    const requestId = response.headers.get("X-Request-ID") || "";
    for await (const [name, data] of serverEvents(response)) {
      if (name === "metadata") {
        renderPassages(data.results || []);
        renderUnderstood(data);
        say("answer-message", "writing…");
      } else if (name === "delta") {
        $("answer").append(data.text);
      } else if (name === "done") {
        renderAnswer(data);
      } else if (name === "error") {
        throw new ApiError(0, { error: { ...data, request_id: requestId } }, requestId);
      }
    }
  } catch (error) {
    if (error.name === "AbortError") say("answer-message", "stopped");
    else say("answer-message", describe(error), "error");
  } finally {
    $("stop-answer").disabled = true;
    answering = null;
  }
}

// --- start ---------------------------------------------------------------------------------

setupCredentials();
setupCollections();
setupUploads();
$("search-form").addEventListener("submit", search);
$("answer-form").addEventListener("submit", ask);
$("stop-answer").addEventListener("click", () => answering && answering.abort());
checkReadiness();
loadCollections().then(() => loadDocuments());
