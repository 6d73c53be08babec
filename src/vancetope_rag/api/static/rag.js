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
      (doc.truncated ? " (truncated: indexed up to the text limit)" : "")
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
    renderFailed(failed);
    renderDocuments(docs);
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
    $("action-result").textContent = rebuild
      ? "Rebuilt the index with the current embedding model; queued " + queued + "."
      : "Queued " + queued + " for reindexing.";
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
      "Rebuild the project index?\n\nThe current index is dropped and re-created with the " +
        "current embedding model; every document is embedded again. Queries find fewer " +
        "results until the indexer has caught up."
    );
    if (ok) busy(() => reindex(true));
  });
  $("btn-refresh").addEventListener("click", () => busy(refresh));
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
