/*
 * pgsaga operator console (docs/protocol.md, "admin API"). Plain JavaScript, no framework, no
 * build step; served by the orchestrator under a CSP that allows only this
 * origin's files.
 *
 * This file is the frame: DOM and formatting helpers, the API client,
 * notices and dialogs, sign-in, auto-refresh and the router. The pages are
 * views in definitions.js, sagas.js and delivery.js, each a function of
 * the address that returns {node, refresh}; they register in pgsaga.views
 * and use the helpers from window.pgsaga. All four files load with defer,
 * in order, before DOMContentLoaded, when the console starts.
 *
 * One rule above all: every value that came from the database is put into
 * the page as text (text nodes via el()), never as markup, so a customerId
 * or an error text holding "<img src=x onerror=...>" shows as those
 * characters. Nothing here parses a string as HTML.
 */
'use strict';

window.pgsaga = (function () {
  // The order saga's states, which the saga list always counts; other
  // definitions add their own Pending<Step>.
  const STATES = ['PendingPayment', 'PendingInventory', 'Compensating',
    'Completed', 'Failed', 'Compensated'];
  const TERMINAL = new Set(['Completed', 'Failed', 'Compensated']);
  const SERVICES = ['orchestrator', 'payment', 'inventory'];
  const FAILURES = 'Failed,Compensated'; // the list filter takes several states
  const REFRESH_MS = 5000;

  const app = {
    csrf: null,       // null while signed out
    view: null,       // {node, refresh()} of the page shown
    timer: null,      // auto-refresh interval
    busy: false,      // a refresh is running
  };
  // The pages, registered by definitions.js, sagas.js and delivery.js:
  // name -> view(parts, params).
  const views = {};

  // --- DOM helpers: text only ------------------------------------------

  /*
   * el('a.btn.primary', {href: '#/x', onclick: f, dataset: {k: v}}, 'text', child...)
   * Strings and numbers become text nodes; null, undefined and false are
   * skipped; arrays are flattened. Attributes go through setAttribute, so
   * they are never parsed as markup either.
   */
  function el(spec, props, ...kids) {
    const parts = spec.split('.');
    const node = document.createElement(parts[0] || 'div');
    if (parts.length > 1) node.className = parts.slice(1).join(' ');
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === null || v === undefined || v === false) continue;
        if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
        else if (k === 'dataset') Object.assign(node.dataset, v);
        else if (k === 'class') node.className += (node.className ? ' ' : '') + v;
        else if (k === 'value') node.value = v;
        else if (k === 'checked' || k === 'disabled' || k === 'hidden') node[k] = Boolean(v);
        else node.setAttribute(k, v === true ? '' : String(v));
      }
    }
    append(node, kids);
    return node;
  }

  function append(node, kids) {
    for (const k of kids) {
      if (k === null || k === undefined || k === false) continue;
      if (Array.isArray(k)) append(node, k);
      else if (k instanceof Node) node.appendChild(k);
      else node.appendChild(document.createTextNode(String(k)));
    }
  }

  function replace(node, ...kids) {
    while (node.firstChild) node.removeChild(node.firstChild);
    append(node, kids);
    return node;
  }

  const $ = (sel, root) => (root || document).querySelector(sel);
  const main = () => $('#main');

  // --- formatting ---------------------------------------------------------

  function pad(n) { return String(n).padStart(2, '0'); }

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  function timeEl(iso) {
    return el('time', { datetime: iso || null, title: iso || null }, fmtTime(iso));
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return '—';
    if (ms < 0) ms = 0;
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + Math.round(s - m * 60) + ' s';
    const hr = Math.floor(m / 60);
    if (hr < 48) return hr + ' h ' + (m - hr * 60) + ' min';
    return Math.floor(hr / 24) + ' d ' + (hr % 24) + ' h';
  }

  function fmtNumber(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : (n === null || n === undefined ? '—' : String(n));
  }

  function badge(stateName) {
    // any definition's step running: coloured as the order saga's
    const known = STATES.includes(stateName) ? stateName
      : /^Pending./.test(stateName || '') ? 'Pending' : 'unknown';
    return el('span.badge', { class: 'st-' + known }, stateName || '—');
  }

  function mono(text, title) {
    return el('span.mono', { title: title || null }, text);
  }

  /*
   * An id's last 8 hex digits: its random part both in version 4 ids and
   * in the time-ordered version 7 ones, whose first digits are alike for
   * everything made in the same minute. The whole id is in the title.
   */
  function shortId(id) {
    return id ? '…' + String(id).slice(-8) : '—';
  }

  function sagaLink(id, full) {
    if (!id) return '—';
    return el('a.mono', { href: '#/sagas/' + encodeURIComponent(id), title: id },
      full ? id : shortId(id));
  }

  // --- the API ------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const opts = { method, credentials: 'same-origin', cache: 'no-store',
      headers: { Accept: 'application/json' } };
    if (method !== 'GET') {
      opts.headers['Content-Type'] = 'application/json';
      opts.headers['X-Pgsaga-Csrf'] = app.csrf || '';
      opts.body = JSON.stringify(body || {});
    }
    let res;
    try {
      res = await fetch(path, opts);
    } catch (e) {
      throw new ApiError(0, 'network', 'The orchestrator did not answer (' + e.message + ').');
    }
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (res.ok) return data || {};
    const err = (data && data.error) || {};
    const msg = err.message || ('HTTP ' + res.status);
    if (res.status === 401 && !path.startsWith('/admin/session')) {
      signedOut('Your session has ended. Sign in again.');
    }
    throw new ApiError(res.status, err.code || 'http_' + res.status, msg);
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
    const s = q.toString();
    return s ? '?' + s : '';
  }

  // --- notices --------------------------------------------------------------

  let toastTimer = null;
  function toast(text, kind) {
    const t = $('#toast');
    replace(t, el('div.toast-body', { class: kind || 'ok' }, text));
    t.classList.add('show');
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => t.classList.remove('show'), 5000);
  }

  function errorBox(e) {
    return el('div.notice.error', { role: 'alert' },
      el('strong', null, e.status ? 'Error ' + e.status + ': ' : 'Error: '), e.message);
  }

  function partialBox(data) {
    const gone = (data && Array.isArray(data.unavailable)) ? data.unavailable : [];
    if (!gone.length) return null;
    return el('div.notice.warn', { role: 'status' },
      el('strong', null, 'Partial answer. '),
      'Not answering: ', gone.join(', '),
      gone.length === 1 ? '. What it holds is missing below.' : '. What they hold is missing below.');
  }

  function stamp() {
    replace($('#updated'), 'Updated ', fmtTime(new Date().toISOString()).slice(11));
  }

  // --- dialogs (never window.alert/confirm) --------------------------------

  /*
   * A modal <dialog>: resolves to null when dismissed, else to the text of
   * its field (or '' without one). Escape and the first button dismiss.
   */
  function ask(opts) {
    return new Promise((resolve) => {
      let field = null;
      if (opts.field) {
        // One line, so Enter confirms as in any form.
        field = el('input.input', { id: 'dlg-field', type: 'text', maxlength: 500, autocomplete: 'off',
          required: opts.field.required || null, placeholder: opts.field.placeholder || null });
      }
      const errorLine = el('p.dlg-error', { role: 'alert' });
      const cancelBtn = el('button.btn', { type: 'button', value: 'cancel' }, opts.cancelLabel || 'Cancel');
      const okBtn = el('button.btn', { type: 'submit', class: opts.danger ? 'danger' : 'primary' }, opts.okLabel);
      const form = el('form.dlg-form', { method: 'dialog', novalidate: true },
        el('h2', { id: 'dlg-title' }, opts.title),
        opts.body ? el('p.dlg-body', null, opts.body) : null,
        field ? el('label.field', { for: 'dlg-field' }, opts.field.label) : null,
        field, errorLine,
        el('div.dlg-actions', null, cancelBtn, okBtn));
      const dlg = el('dialog.dlg', { 'aria-labelledby': 'dlg-title' }, form);
      let done = false;
      const finish = (v) => {
        if (done) return;
        done = true;
        dlg.close();
        dlg.remove();
        resolve(v);
      };
      cancelBtn.addEventListener('click', () => finish(null));
      dlg.addEventListener('cancel', (ev) => { ev.preventDefault(); finish(null); });
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        if (field && opts.field.required && !field.value.trim()) {
          replace(errorLine, 'Please give a reason.');
          field.focus();
          return;
        }
        finish(field ? field.value.trim() : '');
      });
      document.body.appendChild(dlg);
      dlg.showModal();
      (field || cancelBtn).focus();
    });
  }

  // --- sign-in ----------------------------------------------------------------

  function signedOut(message) {
    app.csrf = null;
    setAutoRefresh(false);
    $('#topbar').hidden = true;
    app.view = null;
    const input = el('input.input', { id: 'token', name: 'token', type: 'password',
      autocomplete: 'current-password', required: true, spellcheck: 'false' });
    const errorLine = el('p.signin-error', { id: 'signin-error', role: 'alert' }, message || '');
    const btn = el('button.btn.primary.wide', { type: 'submit', id: 'signin-btn' }, 'Sign in');
    const form = el('form.signin', { id: 'signin', 'aria-labelledby': 'signin-title' },
      el('div.signin-logo', null, el('img', { src: 'favicon.svg', alt: '', width: 40, height: 40 })),
      el('h1', { id: 'signin-title' }, 'pgsaga console'),
      el('p.muted', null, 'Sign in with the ADMIN_TOKEN the orchestrator was started with.'),
      el('label.field', { for: 'token' }, 'Admin token'),
      input, errorLine, btn);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      btn.disabled = true;
      replace(errorLine);
      try {
        const r = await api('POST', '/admin/session', { token: input.value });
        app.csrf = r.csrf;
        input.value = '';
        signedIn();
      } catch (e) {
        replace(errorLine, e.status === 401 ? 'That token is not right.' : e.message);
        input.select();
        input.focus();
      } finally {
        btn.disabled = false;
      }
    });
    replace(main(), el('div.signin-wrap', null, form));
    document.title = 'Sign in · pgsaga console';
    input.focus();
  }

  function signedIn() {
    $('#topbar').hidden = false;
    route();
  }

  async function signOut() {
    try { await api('POST', '/admin/session/logout', {}); } catch (e) { /* signed out anyway */ }
    signedOut('Signed out.');
  }

  // --- auto-refresh -----------------------------------------------------------

  function setAutoRefresh(on) {
    const box = $('#autorefresh');
    box.checked = on;
    clearInterval(app.timer);
    app.timer = null;
    if (on) app.timer = setInterval(tick, REFRESH_MS);
  }

  async function tick() {
    // Not while hidden, a dialog is open or the last refresh still runs:
    // the console must not poll the database harder than one page a tick.
    if (document.hidden || app.busy || !app.view || $('dialog[open]')) return;
    await refresh();
  }

  async function refresh() {
    const view = app.view;
    if (!view) return;
    app.busy = true;
    try {
      await view.refresh();
      stamp();
      // Says which address the page shows, once its data is in (the
      // browser suite waits for it; harmless otherwise).
      view.node.dataset.loaded = view.node.dataset.hash;
    } finally {
      app.busy = false;
    }
  }

  // --- the router -------------------------------------------------------------

  function parseHash() {
    const hash = location.hash || '#/sagas';
    const [path, qs] = hash.slice(1).split('?');
    return { parts: path.split('/').filter(Boolean).map(decodeURIComponent),
      params: new URLSearchParams(qs || '') };
  }

  function route() {
    if (location.hash && !location.hash.startsWith('#/')) return; // in-page anchor
    if (!app.csrf) return;
    const { parts, params } = parseHash();
    const section = parts[0] || 'sagas';
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const make = views[section] || notFoundView;
    const view = make(parts.slice(1), params);
    app.view = view;
    view.node.dataset.hash = location.hash || '#/sagas';
    replace(main(), view.node);
    refresh();
  }

  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function pageHead(title, sub, ...actions) {
    return el('div.page-head', null,
      el('div', null, el('h1', null, title), sub ? el('p.muted', null, sub) : null),
      actions.length ? el('div.actions', null, actions) : null);
  }

  function notFoundView() {
    document.title = 'Not found · pgsaga console';
    return { node: el('section.page', null, pageHead('Not found', 'No page at this address.'),
      el('p', null, el('a', { href: '#/sagas' }, 'Go to the sagas'))), refresh: async () => {} };
  }


  // --- start --------------------------------------------------------------------

  async function start() {
    $('#autorefresh').addEventListener('change', (ev) => {
      setAutoRefresh(ev.target.checked);
      if (ev.target.checked) refresh();
    });
    $('#signout').addEventListener('click', signOut);
    $('#skip').addEventListener('click', (ev) => { ev.preventDefault(); main().focus(); });
    window.addEventListener('hashchange', route);
    try {
      const r = await api('GET', '/admin/session');
      app.csrf = r.csrf;
      signedIn();
    } catch (e) {
      signedOut(e.status === 401 ? '' : e.message);
    }
  }

  // Deferred scripts run before DOMContentLoaded: by then every view is in.
  document.addEventListener('DOMContentLoaded', start);

  return {
    STATES, TERMINAL, SERVICES, FAILURES, views,
    el, replace, $, fmtTime, timeEl, fmtDuration, fmtNumber, badge, mono, shortId, sagaLink,
    ApiError, api, query, toast, errorBox, partialBox, ask, go, pageHead,
  };
}());
