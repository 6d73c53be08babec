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
  let pollTimer = null;

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

  function handle(err) {
    if (err.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      askForToken(err.message + " (" + err.code + ")");
      return;
    }
    showAlert(err.message + " (" + err.code + ")");
  }

  // -- rendering -----------------------------------------------------------------------

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : "–";
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function renderStatus(status) {
    $("rag-exists").textContent = status.exists
      ? "present"
      : "absent (created on the next reindex or project start)";
    $("rag-id").textContent = status.ragId || "–";
    $("rag-model").textContent = status.exists
      ? status.embeddingProvider + " / " + status.embeddingModel
      : "–";
    $("chunk-count").textContent = String(status.chunkCount);
    $("created-at").textContent = when(status.createdAt);
    const paused = $("rag-paused");
    paused.textContent = status.paused || "";
    paused.hidden = !status.paused;
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

  function progressText(work) {
    let text = work.done + " of " + work.total + " done";
    if (work.failed) text += ", " + work.failed + " failed";
    if (work.pending) text += ", " + work.pending + " pending";
    if (work.rate) text += " · " + work.rate.toFixed(1) + " docs/s";
    if (work.pending && work.etaSeconds !== null) {
      text += " · about " + Math.ceil(work.etaSeconds) + " s left";
    }
    return text;
  }

  function setBar(bar, work) {
    bar.max = Math.max(work.total, 1);
    bar.value = work.done + work.failed;
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
    const tbody = $("failed-table").querySelector("tbody");
    tbody.replaceChildren();
    for (const doc of failed.documents) {
      const tr = document.createElement("tr");
      cell(tr, doc.path);
      cell(tr, String(doc.attempts));
      cell(tr, doc.lastError || "no reason recorded", "error-text");
      tbody.appendChild(tr);
    }
    $("failed-table").hidden = failed.documents.length === 0;
    $("failed-empty").hidden = failed.documents.length !== 0;
  }

  function stateText(doc) {
    return (
      doc.state +
      (doc.ragDirty ? " (queued)" : "") +
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
    const tbody = $("documents-table").querySelector("tbody");
    tbody.replaceChildren();
    for (const doc of list.documents) {
      const tr = document.createElement("tr");
      tr.dataset.documentId = doc.id;
      tr.dataset.path = doc.path;
      cell(tr, doc.path);
      cell(tr, stateText(doc), "doc-state");
      const td = document.createElement("td");
      td.appendChild(overrideControl(doc, tr));
      tr.appendChild(td);
      cell(tr, "", "row-status");
      tbody.appendChild(tr);
    }
    $("documents-empty").hidden = list.documents.length !== 0;
  }

  // -- actions -------------------------------------------------------------------------

  async function refresh() {
    const [status, failed, docs] = await Promise.all([
      api("GET", "/rag/status"),
      api("GET", "/rag/documents?state=failed"),
      api("GET", "/rag/documents"),
    ]);
    renderStatus(status);
    renderProgress(status.progress);
    renderFailed(failed);
    renderDocuments(docs);
    schedulePoll(status.progress.busy);
    $("refreshed-at").textContent = new Date().toLocaleTimeString();
    $("token-card").hidden = true;
    $("main").hidden = false;
    $("btn-forget-token").hidden = false;
  }

  async function busy(work) {
    const buttons = document.querySelectorAll("#action-card button");
    buttons.forEach((b) => (b.disabled = true));
    showAlert("");
    try {
      await work();
    } catch (err) {
      handle(err);
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
    const ok = window.confirm(
      "Rebuild the project index with the current embedding model?\n\nEvery document is " +
        "embedded again into a new index beside the current one, which keeps answering " +
        "until the new one is complete and replaces it."
    );
    if (ok) busy(() => reindex(true));
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
