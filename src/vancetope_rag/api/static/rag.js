// RAG tab (spec §8.2) and ragEnabled tristate (§8.1). Plain DOM, no build step.
// Data is always inserted with textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "vancetope-rag-token";
  const body = document.body;
  const tenant = body.dataset.tenant;
  const project = body.dataset.project;
  const base =
    "/brain/" + encodeURIComponent(tenant) + "/projects/" + encodeURIComponent(project);
  const OVERRIDES = [
    ["auto", "Auto"],
    ["on", "Always index"],
    ["off", "Never index"],
  ];
  const $ = (id) => document.getElementById(id);
  // While work is pending the page refreshes itself every POLL_MS.
  const POLL_MS = 1500;
  // The documents list shows PAGE rows at a time (the REST route pages with limit/offset).
  const PAGE = 50;
  let pollTimer = null;
  let lastStatus = null;
  let docsOffset = 0;
  let docsQuery = "";

  // -- token ---------------------------------------------------------------------------

  function takeTokenFromUrl() {
    // ?token= (tests) or #token= (never sent to the server); strip both from the address bar.
    const url = new URL(window.location.href);
    const hash = new URLSearchParams(url.hash.replace(/^#/, ""));
    const token = url.searchParams.get("token") || hash.get("token");
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      url.searchParams.delete("token");
      hash.delete("token");
      url.hash = hash.toString();
      window.history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function askForToken(message) {
    $("main").hidden = true;
    $("token-card").hidden = false;
    $("btn-forget-token").hidden = true;
    if (message) showAlert(message);
    $("token-input").focus();
  }

  // -- API -----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, payload) {
    const headers = { Accept: "application/json", Authorization: "Bearer " + token() };
    const init = { method: method, headers: headers, cache: "no-store" };
    if (payload !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let response;
    try {
      response = await fetch(base + path, init);
    } catch (err) {
      throw new ApiError(0, "NETWORK", "the server cannot be reached: " + err.message);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (!response.ok) {
      const message = data && data.error ? data.error : "HTTP " + response.status;
      const code = data && data.code ? data.code : "HTTP_" + response.status;
      throw new ApiError(response.status, code, message);
    }
    return data;
  }

  function showAlert(message) {
    const el = $("alert");
    el.textContent = message;
    el.hidden = !message;
  }

  function showError(el, message) {
    el.textContent = message;
    el.hidden = !message;
    if (message) el.scrollIntoView({ block: "nearest" });
  }

  // An error goes where the user looks: next to the control that failed (``where``), else
  // the page's alert at the top.
  function handle(err, where) {
    if (err.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      askForToken(err.message + " (" + err.code + ")");
      return;
    }
    const message = err.message + " (" + err.code + ")";
    if (where) showError(where, message);
    else showAlert(message);
  }

  // -- rendering -----------------------------------------------------------------------

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : "–";
  }

  // A cell; ``label`` names it where a phone shows each row as a block (class "stack").
  function cell(row, text, className, label) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    if (label) td.dataset.label = label;
    row.appendChild(td);
    return td;
  }

  // Fill a table's body: a row per item, its cells from ``fill(tr, item)``.
  function fillTable(id, items, fill) {
    const tbody = $(id).querySelector("tbody");
    tbody.replaceChildren();
    for (const item of items) {
      const tr = document.createElement("tr");
      fill(tr, item);
      tbody.appendChild(tr);
    }
  }

  function renderStatus(status) {
    $("rag-exists").textContent = status.exists
      ? "present"
      : status.noRagReason
        ? "absent: " + status.noRagReason
        : "absent (created on the next reindex or project start)";
    $("rag-id").textContent = status.ragId || "–";
    $("rag-model").textContent = status.exists
      ? status.embeddingProvider + " / " + status.embeddingModel
      : "–";
    $("chunk-count").textContent = String(status.chunkCount);
    $("created-at").textContent = when(status.createdAt);
    lastStatus = status;
    const paused = $("rag-paused");
    paused.textContent = status.paused || "";
    paused.hidden = !status.paused;
    // Documents wait and no indexer worker ticked lately: say so (the heartbeats).
    const indexer = status.indexer || { note: null, workers: [] };
    const note = $("rag-indexer");
    note.textContent = indexer.note || "";
    note.hidden = !indexer.note;
    const workers = $("indexer-workers");
    workers.textContent = indexer.workers.length
      ? "indexer workers: " + indexer.workers.map(
        (w) => w.workerId + " (" + w.version + ", last tick " + when(w.lastTick) + ")"
      ).join(", ")
      : "";
    workers.hidden = !indexer.workers.length;
    $("rag-profile").textContent = status.modelProfile
      ? profileText(status.modelProfile)
      : "–";
    const auto = status.minScoreAuto;
    $("rag-calibration").textContent = !status.exists
      ? "–"
      : auto
        ? "minScore auto " + auto.minScore.toFixed(4) + ", relevance gap " +
          (auto.gap === null || auto.gap === undefined ? "none" : auto.gap.toFixed(4)) +
          " (calibrated " + when(auto.calibratedAt) + " over " + auto.chunks + " chunks)" +
          rerankCutText(auto)
        : "not calibrated yet";
    const list = $("state-counts");
    list.replaceChildren();
    for (const [state, count] of Object.entries(status.documents || {})) {
      const li = document.createElement("li");
      li.dataset.state = state;
      li.textContent = state + ": " + count;
      list.appendChild(li);
    }
    if (status.truncatedDocuments) {
      const li = document.createElement("li");
      li.dataset.state = "truncated";
      li.textContent = "indexed up to the text limit: " + status.truncatedDocuments;
      list.appendChild(li);
    }
  }

  // The cut of hits the project's reranker scored: its rule in its own scale, or why the
  // gap cuts them (the reranker had nothing to measure); nothing without a reranker.
  function rerankCutText(auto) {
    if (auto.rerank) {
      return "; with reranker " + auto.rerank.reranker + ": keeps hits " + auto.rerank.keeps +
        " (calibrated " + when(auto.rerank.calibratedAt) + ")";
    }
    if (auto.rerankUnmeasurable) {
      return "; with the reranker: " + auto.rerankUnmeasurable.means;
    }
    return "";
  }

  // Dimension, window and prefixes the RAG pinned when it was created.
  function profileText(p) {
    const parts = ["dimension " + p.dimension,
      p.window === null ? "window unknown (created before model profiles)" : "window " + p.window];
    if (p.queryPrefix) parts.push("query prefix “" + p.queryPrefix + "”");
    if (p.documentPrefix) parts.push("document prefix “" + p.documentPrefix + "”");
    if (!p.queryPrefix && !p.documentPrefix) parts.push("no prefixes");
    return parts.join(", ");
  }

  // Done, failed, skipped (when any) and waiting are separate numbers; a rate and the time
  // left only while the work runs (the server sends etaSeconds null otherwise), a pause with
  // its reason.
  function progressText(work) {
    let text = work.done + " done · " + work.failed + " failed · " +
      (work.skipped ? work.skipped + " skipped · " : "") + work.pending + " waiting";
    if (work.paused) {
      text += " · paused: " + work.paused;
    } else if (work.etaSeconds !== null) {
      text += " · " + work.rate.toFixed(1) + " docs/s · about " +
        Math.ceil(work.etaSeconds) + " s left";
    }
    return text;
  }

  // The bar fills with what is done: a failed document is not progress.
  function setBar(bar, work) {
    bar.max = Math.max(work.total, 1);
    bar.value = work.done;
  }

  function renderProgress(progress) {
    setBar($("indexing-bar"), progress.indexing);
    $("indexing-text").textContent = progressText(progress.indexing);
    const rebuild = progress.migration;
    $("rebuild-box").hidden = !rebuild;
    if (!rebuild) return;
    const running = rebuild.state === "running" || rebuild.state === "switching";
    $("rebuild-models").textContent = rebuild.fromModel + " → " + rebuild.toModel;
    setBar($("rebuild-bar"), rebuild);
    $("rebuild-text").textContent = rebuild.state + ": " + progressText(rebuild);
    $("rebuild-box").dataset.state = rebuild.state;
    $("rebuild-reason").textContent = rebuild.reason || "";
    $("rebuild-reason").hidden = !rebuild.reason;
    $("rebuild-note").hidden = !running;
    $("btn-cancel-rebuild").hidden = rebuild.state !== "running";
  }

  function schedulePoll(busy) {
    if (pollTimer !== null) {
      clearTimeout(pollTimer);
      pollTimer = null;
    }
    if (!busy) return;
    pollTimer = setTimeout(() => {
      pollTimer = null;
      refresh().catch(handle);
    }, POLL_MS);
  }

  function renderFailed(failed) {
    fillTable("failed-table", failed.documents, (tr, doc) => {
      tr.dataset.path = doc.path;
      cell(tr, doc.path, null, "Path");
      cell(tr, doc.state === "failed" ? "failed" : doc.state + " (will retry)", null, "State");
      cell(tr, String(doc.attempts), null, "Attempts");
      cell(tr, doc.lastError || "no reason recorded", "error-text", "Reason");
    });
    $("failed-table").hidden = failed.documents.length === 0;
    $("failed-empty").hidden = failed.documents.length !== 0;
  }

  function renderAttention(status) {
    fillTable("attention-table", status.needsAttention || [], (tr, item) => {
      tr.dataset.path = item.path;
      cell(tr, item.path);
      cell(tr, item.error, "error-text");
    });
    $("attention-count").textContent = "(" + (status.needsAttentionCount || 0) + ")";
    $("attention-box").hidden = !status.needsAttentionCount;
  }

  function stateText(doc) {
    return (
      doc.state +
      (doc.ragDirty ? " (queued)" : "") +
      (doc.lastError && doc.state !== "failed" ? " (last attempt failed)" : "") +
      (doc.truncated
        ? " (truncated: " + (doc.truncatedReason || "indexed up to the text limit") + ")"
        : "")
    );
  }

  function overrideControl(doc, row) {
    const fieldset = document.createElement("fieldset");
    fieldset.className = "tristate";
    const legend = document.createElement("legend");
    legend.className = "visually-hidden";
    legend.textContent = "Project RAG for " + doc.path;
    fieldset.appendChild(legend);
    for (const [value, label] of OVERRIDES) {
      const id = "rag-" + doc.id + "-" + value;
      const input = document.createElement("input");
      input.type = "radio";
      input.name = "rag-" + doc.id;
      input.id = id;
      input.value = value;
      input.checked = doc.ragEnabled === value;
      input.addEventListener("change", () => setOverride(doc, value, row));
      const lab = document.createElement("label");
      lab.htmlFor = id;
      lab.textContent = label;
      fieldset.append(input, lab);
    }
    return fieldset;
  }

  function renderDocuments(list) {
    fillTable("documents-table", list.documents, (tr, doc) => {
      tr.dataset.documentId = doc.id;
      tr.dataset.path = doc.path;
      cell(tr, doc.path);
      cell(tr, stateText(doc), "doc-state");
      const td = document.createElement("td");
      td.appendChild(overrideControl(doc, tr));
      tr.appendChild(td);
      cell(tr, "", "row-status");
    });
    const shown = list.documents.length;
    $("documents-empty").textContent = docsQuery
      ? "No document path holds “" + docsQuery + "”."
      : "No documents in this project.";
    $("documents-empty").hidden = shown !== 0;
    $("documents-range").textContent = shown
      ? docsOffset + 1 + "–" + (docsOffset + shown) + " of " + list.total
      : "0 of " + list.total;
    $("documents-prev").disabled = docsOffset === 0;
    $("documents-next").disabled = docsOffset + shown >= list.total;
  }

  function documentsPath() {
    let path = "/rag/documents?limit=" + PAGE + "&offset=" + docsOffset;
    if (docsQuery) path += "&q=" + encodeURIComponent(docsQuery);
    return path;
  }

  async function loadDocuments() {
    let docs = await api("GET", documentsPath());
    if (docsOffset > 0 && docs.documents.length === 0 && docs.total > 0) {
      docsOffset = Math.floor((docs.total - 1) / PAGE) * PAGE; // the list shrank: last page
      docs = await api("GET", documentsPath());
    }
    renderDocuments(docs);
  }

  function renderQuery(result) {
    fillTable("query-table", result.hits, (tr, hit) => {
      cell(tr, String(hit.rank), "rank", "#");
      cell(tr, hit.label, null, "Label");
      cell(tr, orderedBy(result.order, hit), "ordered-by", "Ordered by");
      cell(tr, "cosine " + hit.score.toFixed(3), "score", "Cosine");
      cell(tr, hit.path || hit.source, null, "Source");
      cell(tr, hit.text, "excerpt", "Excerpt");
    });
    $("query-table").hidden = result.hits.length === 0;
    const p = result.params;
    const used = "topK " + p.topK + ", minScore " + p.minScore + ", " + p.mode + ", " +
      cutText(result);
    if (result.reason) {
      $("query-summary").textContent = "Nothing is queried: " + result.reason + ".";
    } else if (result.hits.length === 0) {
      $("query-summary").textContent =
        "No excerpt reaches minScore " + p.minScore + " (" + used + "): a turn gets no context.";
    } else {
      $("query-summary").textContent =
        plural(result.hits.length, "hit") + " (" + used + ") in the order a turn uses: " +
        ORDERS[result.order] + ".";
    }
  }

  // What this query's hits were cut by (the reranker's rule or the cosine gap it used), not
  // the RAG's gap in params.relevanceCut.
  function cutText(result) {
    if (result.cut.by === "none") return "no relevance cut";
    return "relevance cut: " + result.cut.keeps + ", " + plural(result.dropped.length, "hit") +
      " dropped";
  }

  // What orders the hits, said in words, and each hit's number in that order, labelled.
  const ORDERS = {
    cosine: "by cosine similarity (dense)",
    fused: "by fused score (hybrid: dense and lexical ranks fused), not by cosine",
    rerank: "by the reranker's score, not by cosine",
  };

  function orderedBy(order, hit) {
    if (order === "rerank") return "rerank " + hit.rerankScore.toFixed(3);
    if (order === "fused") {
      const dense = hit.denseRank ? "#" + hit.denseRank : "–";
      const lexical = hit.lexicalRank ? "#" + hit.lexicalRank : "–";
      return "fused " + hit.fusedScore.toFixed(4) + " (dense " + dense + ", lexical " +
        lexical + ")";
    }
    return "cosine " + hit.score.toFixed(3);
  }

  async function runQuery() {
    const payload = { query: $("query-input").value };
    const topK = $("query-topk").value.trim();
    if (topK) payload.topK = Number(topK);
    $("query-summary").textContent = "searching…";
    showError($("query-error"), "");
    try {
      renderQuery(await api("POST", "/rag/query", payload));
    } catch (err) {
      $("query-summary").textContent = "";
      $("query-table").hidden = true;
      handle(err, $("query-error"));
    }
  }

  // -- actions -------------------------------------------------------------------------

  async function refresh() {
    const [status, failed] = await Promise.all([
      api("GET", "/rag/status"),
      api("GET", "/rag/documents?withError=true&limit=200"),
      loadDocuments(),
    ]);
    renderStatus(status);
    renderAttention(status);
    renderProgress(status.progress);
    renderFailed(failed);
    schedulePoll(status.progress.busy);
    $("refreshed-at").textContent = new Date().toLocaleTimeString();
    $("token-card").hidden = true;
    $("main").hidden = false;
    $("btn-forget-token").hidden = false;
  }

  // Runs an action with the action buttons disabled; its error shows beside them.
  async function busy(work) {
    const buttons = document.querySelectorAll("#action-card button");
    buttons.forEach((b) => (b.disabled = true));
    showAlert("");
    showError($("action-error"), "");
    $("action-result").textContent = ""; // an earlier action's outcome is not this one's
    try {
      await work();
    } catch (err) {
      handle(err, $("main").hidden ? null : $("action-error"));
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  async function reindex(rebuild) {
    const result = await api("POST", "/rag/reindex?rebuild=" + rebuild);
    const queued = plural(result.documentsQueued, "document");
    if (rebuild && result.migration) {
      $("action-result").textContent =
        "Rebuild started: " + result.migration.fromModel + " → " + result.migration.toModel +
        "; " + queued + " queued. The current index answers until the new one is complete.";
    } else if (rebuild) {
      $("action-result").textContent = "Created the index; queued " + queued + ".";
    } else {
      $("action-result").textContent = "Queued " + queued + " for reindexing.";
    }
    await refresh();
  }

  async function cancelRebuild() {
    const result = await api("DELETE", "/rag/rebuild");
    $("action-result").textContent =
      "Rebuild cancelled; the index stays on " + result.migration.fromModel + ".";
    await refresh();
  }

  async function setOverride(doc, value, row) {
    const status = row.querySelector(".row-status");
    status.textContent = "saving…";
    row.querySelectorAll("input").forEach((i) => (i.disabled = true));
    try {
      const updated = await api("PATCH", "/documents/" + encodeURIComponent(doc.id), {
        ragEnabled: value,
      });
      doc.ragEnabled = updated.ragEnabled;
      row.querySelector(".doc-state").textContent = stateText(updated);
      status.textContent = "saved";
    } catch (err) {
      status.textContent = "not saved";
      const previous = row.querySelector('input[value="' + doc.ragEnabled + '"]');
      if (previous) previous.checked = true;
      handle(err);
    } finally {
      row.querySelectorAll("input").forEach((i) => (i.disabled = false));
    }
  }

  // -- wiring --------------------------------------------------------------------------

  $("btn-reindex").addEventListener("click", () => busy(() => reindex(false)));
  $("btn-rebuild").addEventListener("click", () => {
    const status = lastStatus || {};
    const target = status.configuredModel
      ? "onto " + status.configuredModel
      : "with the current embedding settings";
    const from = status.exists
      ? " It is now on " + status.embeddingProvider + ":" + status.embeddingModel + "."
      : "";
    const ok = window.confirm(
      "Rebuild the project index " + target + "?" + from + "\n\nEvery document is " +
        "embedded again into a new index beside the current one, which keeps answering " +
        "until the new one is complete and replaces it."
    );
    if (ok) busy(() => reindex(true));
  });
  $("query-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const button = $("btn-query");
    button.disabled = true;
    runQuery().finally(() => (button.disabled = false));
  });
  let searchTimer = null;
  $("documents-search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      docsQuery = $("documents-search").value.trim();
      docsOffset = 0;
      loadDocuments().catch(handle);
    }, 250);
  });
  $("documents-search-form").addEventListener("submit", (event) => event.preventDefault());
  $("documents-prev").addEventListener("click", () => {
    docsOffset = Math.max(0, docsOffset - PAGE);
    loadDocuments().catch(handle);
  });
  $("documents-next").addEventListener("click", () => {
    docsOffset += PAGE;
    loadDocuments().catch(handle);
  });
  $("btn-refresh").addEventListener("click", () => busy(refresh));
  $("btn-cancel-rebuild").addEventListener("click", () => {
    if (window.confirm("Cancel the rebuild? The current index stays as it is.")) {
      busy(cancelRebuild);
    }
  });
  $("btn-forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askForToken("");
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token-input").value = "";
    showAlert("");
    busy(refresh);
  });

  takeTokenFromUrl();
  if (token()) {
    busy(refresh);
  } else {
    askForToken("");
  }
})();
