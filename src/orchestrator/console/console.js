/*
 * pgsaga operator console (SPEC §9). Plain JavaScript, no framework, no
 * build step; served by the orchestrator under a CSP that allows only this
 * origin's files.
 *
 * One rule above all: every value that came from the database is put into
 * the page as text (text nodes via el()), never as markup, so a customerId
 * or an error text holding "<img src=x onerror=...>" shows as those
 * characters. Nothing here parses a string as HTML.
 */
'use strict';

(function () {
  const STATES = ['PendingPayment', 'PendingInventory', 'Compensating',
    'Completed', 'Failed', 'Compensated'];
  const TERMINAL = new Set(['Completed', 'Failed', 'Compensated']);
  const SERVICES = ['orchestrator', 'payment', 'inventory'];
  const FAILURES = 'Failed,Compensated'; // the list filter takes several states
  const REFRESH_MS = 5000;
  // Which step of the saga a message belongs to, by its type.
  const STEP_OF_TYPE = {
    PayCommand: 'PendingPayment', PaymentSucceeded: 'PendingPayment',
    PaymentFailed: 'PendingPayment',
    ReserveInventoryCommand: 'PendingInventory', InventoryReserved: 'PendingInventory',
    InventoryReservationFailed: 'PendingInventory',
    RefundPaymentCommand: 'Compensating', PaymentRefunded: 'Compensating',
    ReleaseInventoryCommand: 'Compensating', InventoryReleased: 'Compensating',
  };

  const app = {
    csrf: null,       // null while signed out
    view: null,       // {refresh()} of the page shown
    timer: null,      // auto-refresh interval
    busy: false,      // a refresh is running
    cursors: [],      // saga list: cursors of the pages before this one
    cursorKey: '',    // the filters the cursors belong to
  };

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
    const known = STATES.includes(stateName) ? stateName : 'unknown';
    return el('span.badge', { class: 'st-' + known }, stateName || '—');
  }

  function mono(text, title) {
    return el('span.mono', { title: title || null }, text);
  }

  function shortId(id) {
    return id ? String(id).slice(0, 8) : '—';
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
        replace(errorLine, e.status === 401 ? 'That token is not right.'
          : e.status === 429 ? 'Too many attempts. Wait a minute, then try again.'
            : e.message);
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
    let view;
    if (section === 'sagas' && parts[1]) view = sagaView(parts[1]);
    else if (section === 'sagas') view = listView(params);
    else if (section === 'dead-letters') view = deadLetterView(params);
    else if (section === 'deliveries') view = deliveryView();
    else view = notFoundView();
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

  // --- saga list ----------------------------------------------------------------

  function listView(params) {
    document.title = 'Sagas · pgsaga console';
    const f = {
      state: params.get('state') || '',
      customerId: params.get('customerId') || '',
      itemId: params.get('itemId') || '',
      since: params.get('since') || '',
      until: params.get('until') || '',
      stuck: params.get('stuck') || '',
      limit: params.get('limit') || '50',
      cursor: params.get('cursor') || '',
    };
    const filterKey = JSON.stringify([f.state, f.customerId, f.itemId, f.since, f.until, f.stuck, f.limit]);
    if (app.cursorKey !== filterKey) { app.cursors = []; app.cursorKey = filterKey; }
    if (!f.cursor) app.cursors = [];

    const chips = el('div.chips', { role: 'group', 'aria-label': 'Filter by state' });
    const status = el('div.status-area');
    const results = el('div.results', { 'aria-live': 'polite' });
    const pager = el('nav.pager', { 'aria-label': 'Pages' });

    const input = (name, label, attrs) => el('div.fld', null,
      el('label.field', { for: 'f-' + name }, label),
      el('input.input', Object.assign({ id: 'f-' + name, name, value: f[name] }, attrs || {})));
    const form = el('form.filters', { id: 'filters', 'aria-label': 'Filters' },
      input('customerId', 'Customer', { placeholder: 'c-1', autocomplete: 'off', spellcheck: 'false' }),
      input('itemId', 'Item', { placeholder: 'A001', autocomplete: 'off', spellcheck: 'false' }),
      input('since', 'Created since', { type: 'datetime-local', step: 1 }),
      input('until', 'Created until', { type: 'datetime-local', step: 1 }),
      input('stuck', 'Stuck for more than (min)', { type: 'number', min: 1, step: 1, placeholder: 'e.g. 5', inputmode: 'numeric' }),
      el('div.fld.fld-buttons', null,
        el('button.btn.primary', { type: 'submit' }, 'Apply'),
        el('button.btn', { type: 'button', id: 'f-reset' }, 'Reset')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      const next = { state: f.state, limit: f.limit === '50' ? '' : f.limit };
      for (const k of ['customerId', 'itemId', 'since', 'until', 'stuck']) next[k] = String(fd.get(k) || '').trim();
      go('#/sagas' + query(next));
    });
    $('#f-reset', form).addEventListener('click', () => go('#/sagas'));

    function withFilters(changes) {
      const next = Object.assign({}, f, { cursor: '' }, changes);
      if (next.limit === '50') next.limit = '';
      return '#/sagas' + query(next);
    }

    function renderChips(counts) {
      const total = Object.values(counts || {}).reduce((a, b) => a + (Number(b) || 0), 0);
      const chip = (value, label, n) => el('a.chip', {
        href: withFilters({ state: value }), class: value ? 'st-' + value.replace(',', '-') : null,
        'aria-current': f.state === value ? 'true' : null,
        dataset: { state: value === FAILURES ? 'failures' : value || 'all' },
      }, el('span', null, label), el('span.count', null, fmtNumber(n)));
      const n = (s) => Number((counts && counts[s]) || 0);
      replace(chips, chip('', 'All', total),
        STATES.map((s) => chip(s, s, n(s))),
        chip(FAILURES, 'Failures', n('Failed') + n('Compensated')));
    }

    function renderRows(sagas) {
      if (!sagas.length) {
        return el('div.empty', null, el('p', null, 'No saga matches these filters.'));
      }
      const now = Date.now();
      const head = el('thead', null, el('tr', null,
        ['Saga', 'State', 'Customer', 'Item', 'Qty', 'Amount', 'Created', 'Updated'].map((t) =>
          el('th', { scope: 'col', class: ['Qty', 'Amount'].includes(t) ? 'num' : null }, t))));
      const body = el('tbody', null, sagas.map((s) => {
        const idle = s.updatedAt ? now - new Date(s.updatedAt).getTime() : null;
        return el('tr', { dataset: { sagaId: s.sagaId } },
          el('td', { 'data-label': 'Saga' }, sagaLink(s.sagaId)),
          el('td', { 'data-label': 'State' }, badge(s.state),
            !TERMINAL.has(s.state) && idle !== null && idle > 60000
              ? el('span.idle', { title: 'not updated for ' + fmtDuration(idle) }, ' idle ' + fmtDuration(idle)) : null),
          el('td.cust', { 'data-label': 'Customer' }, s.customerId),
          el('td', { 'data-label': 'Item' }, s.itemId),
          el('td.num', { 'data-label': 'Qty' }, fmtNumber(s.qty)),
          el('td.num', { 'data-label': 'Amount' }, fmtNumber(s.amount)),
          el('td', { 'data-label': 'Created' }, timeEl(s.createdAt)),
          el('td', { 'data-label': 'Updated' }, timeEl(s.updatedAt)));
      }));
      return el('div.table-wrap', null, el('table.grid.cards', { id: 'saga-table' },
        el('caption.sr-only', null, 'Sagas, newest first'), head, body));
    }

    function renderPager(data, shown) {
      const page = app.cursors.length + 1;
      replace(pager,
        el('span.muted', null, 'Page ' + page + ' · ' + shown + (shown === 1 ? ' saga' : ' sagas')),
        el('span.pager-btns', null,
          page > 1 ? el('a.btn.small', { href: withFilters({}), id: 'page-first' }, 'First') : null,
          page > 1 ? el('button.btn.small', { type: 'button', id: 'page-prev', onclick: () => {
            const prev = app.cursors.pop();
            go(withFilters({ cursor: prev || '' }));
            if (!prev) app.cursors = [];
          } }, '← Newer') : null,
          data.next ? el('button.btn.small', { type: 'button', id: 'page-next', onclick: () => {
            app.cursors.push(f.cursor);
            go(withFilters({ cursor: data.next }));
          } }, 'Older →') : null));
    }

    async function refresh() {
      const q = {
        state: f.state, customerId: f.customerId, itemId: f.itemId,
        since: f.since ? new Date(f.since).toISOString() : '',
        until: f.until ? new Date(f.until).toISOString() : '',
        stuckSeconds: f.stuck ? Math.round(Number(f.stuck) * 60) : '',
        limit: f.limit, cursor: f.cursor,
      };
      try {
        const data = await api('GET', '/admin/api/sagas' + query(q));
        const sagas = Array.isArray(data.sagas) ? data.sagas : [];
        renderChips(data.counts || {});
        replace(status, partialBox(data));
        replace(results, renderRows(sagas));
        renderPager(data, sagas.length);
      } catch (e) {
        replace(status, errorBox(e));
      }
    }

    const active = [f.state && 'state ' + f.state, f.customerId && 'customer ' + f.customerId,
      f.itemId && 'item ' + f.itemId, f.stuck && 'stuck > ' + f.stuck + ' min'].filter(Boolean);
    // On a phone the filters fold away unless one is set.
    const box = el('details.filter-box', { open: window.innerWidth > 640 || active.length > 0 || null },
      el('summary', null, 'Filters'), form);
    const node = el('section.page', { id: 'page-sagas' },
      pageHead('Sagas', active.length ? 'Newest first · ' + active.join(' · ') : 'Newest first'),
      chips, box, status, results, pager);
    return { node, refresh };
  }

  // --- one saga -----------------------------------------------------------------

  function stepKind(h) {
    if (h.cause === 'Cancelled' || h.cause === 'StepTimeout' ||
        h.toState === 'Compensating' || h.toState === 'Compensated') return 'compensation';
    if (h.toState === 'Failed') return 'failure';
    if (h.toState === 'Completed') return 'done';
    return 'forward';
  }

  const KIND_LABEL = { forward: 'forward', compensation: 'compensation', failure: 'failed', done: 'done' };

  function messageRow(m) {
    const dead = Boolean(m.deadAt);
    const status = dead ? el('span.msg-status.dead', null, 'dead ', timeEl(m.deadAt))
      : m.processedAt ? el('span.msg-status.ok', null, 'done ', timeEl(m.processedAt))
        : el('span.msg-status.wait', null, 'pending');
    return el('li.msg', { class: dead ? 'is-dead' : null, dataset: { messageId: m.messageId || '' } },
      el('div.msg-line', null,
        el('span.dir', { class: m.direction === 'in' ? 'in' : 'out', title: m.direction === 'in' ? 'received (inbox)' : 'sent (outbox)' },
          m.direction === 'in' ? 'in' : 'out'),
        el('span.svc', null, m.service),
        el('span.type', null, m.type || '—'),
        m.direction !== 'in' && m.attemptCount > 0
          ? el('span.attempts', null, m.attemptCount + (m.attemptCount === 1 ? ' failed attempt' : ' failed attempts')) : null,
        status,
        el('span.mono.msgid', { title: m.messageId }, shortId(m.messageId))),
      m.lastError ? el('pre.err', null, m.lastError) : null);
  }

  function kvTable(obj, caption) {
    if (!obj) return el('p.muted', null, 'None.');
    return el('table.kv', null, el('caption.sr-only', null, caption),
      el('tbody', null, Object.entries(obj).map(([k, v]) => el('tr', null,
        el('th', { scope: 'row' }, k),
        el('td', null, v !== null && typeof v === 'object' ? JSON.stringify(v)
          : /(At|_at)$/.test(k) && typeof v === 'string' ? timeEl(v) : (v === null ? '—' : String(v)))))));
  }

  /*
   * A message's rows (the sender's outbox row, the receiver's inbox row)
   * next to each other, sender first; messages in the order they were
   * first seen.
   */
  function orderMessages(list) {
    const first = new Map();
    const when = (m) => String(m.processedAt || m.deadAt || '~');
    for (const m of list) {
      const t = when(m);
      if (!first.has(m.messageId) || t < first.get(m.messageId)) first.set(m.messageId, t);
    }
    return list.slice().sort((a, b) =>
      first.get(a.messageId).localeCompare(first.get(b.messageId)) ||
      String(a.messageId).localeCompare(String(b.messageId)) ||
      (a.direction === 'out' ? -1 : 1) - (b.direction === 'out' ? -1 : 1));
  }

  function timeline(saga) {
    const hist = (Array.isArray(saga.history) ? saga.history.slice() : [])
      .sort((a, b) => (a.version || 0) - (b.version || 0));
    const msgs = orderMessages(Array.isArray(saga.messages) ? saga.messages : []);
    const used = new Set();
    const end = TERMINAL.has(saga.state) ? null : Date.now();
    const rows = hist.map((h, i) => {
      const next = hist[i + 1];
      const start = new Date(h.at).getTime();
      const stop = next ? new Date(next.at).getTime() : end;
      const kind = stepKind(h);
      // The messages of the step this transition entered: its command out
      // and the answer that ended it. A state entered twice (Compensating
      // after a release) shows them once, at its first entry.
      const mine = [];
      msgs.forEach((m, j) => {
        if (!used.has(j) && STEP_OF_TYPE[m.type] === h.toState) { used.add(j); mine.push(m); }
      });
      const dur = stop === null ? null : stop - start;
      return el('li.step', { class: 'k-' + kind, dataset: { version: h.version, kind } },
        el('span.dot', { 'aria-hidden': 'true' }),
        el('div.step-main', null,
          el('div.step-head', null,
            el('span.step-ver', null, 'v' + h.version),
            h.fromState ? el('span.step-from', null, h.fromState) : el('span.step-from.none', null, 'start'),
            el('span.arrow', { 'aria-hidden': 'true' }, '→'),
            el('span.step-to', null, badge(h.toState)),
            el('span.kind', { class: 'k-' + kind }, KIND_LABEL[kind])),
          el('div.step-meta', null,
            el('span', null, 'cause ', el('strong.step-cause', null, h.cause || '—')),
            el('span', null, 'at ', timeEl(h.at)),
            el('span.step-dur', null, TERMINAL.has(h.toState) ? 'final state'
              : (next ? 'in state ' : 'in state so far ') + fmtDuration(dur)),
            h.messageId ? el('span', null, 'message ', mono(shortId(h.messageId), h.messageId)) : null),
          mine.length ? el('ul.msgs', null, mine.map(messageRow)) : null));
    });
    const others = msgs.filter((m, j) => !used.has(j));
    return { rows, others };
  }

  function sagaView(id) {
    document.title = 'Saga ' + shortId(id) + ' · pgsaga console';
    const body = el('div.saga-body');
    const status = el('div.status-area');
    const node = el('section.page', { id: 'page-saga' },
      el('nav.crumbs', { 'aria-label': 'Breadcrumb' }, el('a', { href: '#/sagas' }, 'Sagas'), ' / ',
        el('span.mono', null, id)),
      status, body);
    let opened = false;

    async function cancel(saga) {
      const reason = await ask({
        title: 'Cancel saga ' + shortId(saga.sagaId) + '?',
        body: 'It stops where it is and compensates what has run (refund the payment, release the reservation), ' +
          'exactly as on a step deadline. This cannot be undone.',
        field: { label: 'Reason (recorded with the saga)', required: true, placeholder: 'e.g. customer asked to cancel' },
        cancelLabel: 'Keep saga', okLabel: 'Cancel saga', danger: true,
      });
      if (reason === null) return;
      try {
        const r = await api('POST', '/admin/api/sagas/' + encodeURIComponent(saga.sagaId) + '/cancel', { reason });
        toast(r.cancelled === false ? 'The saga was already cancelled.'
          : 'Cancelled: the saga compensates what has run.');
      } catch (e) {
        toast(e.code === 'saga_finished' ? 'The saga had already finished.' : e.message, 'error');
      }
      await refresh();
    }

    function render(saga) {
      const { rows, others } = timeline(saga);
      const created = new Date(saga.createdAt).getTime();
      const last = TERMINAL.has(saga.state) ? new Date(saga.updatedAt).getTime() : Date.now();
      const actions = [];
      if (!TERMINAL.has(saga.state)) {
        actions.push(el('button.btn.danger', { type: 'button', id: 'cancel-saga', onclick: () => cancel(saga) }, 'Cancel saga…'));
      }
      actions.push(el('a.btn', { href: '#/sagas/' + encodeURIComponent(saga.sagaId), id: 'deep-link',
        title: 'Link to this page' }, 'Link'));
      const raw = el('details.raw', { open: opened || null },
        el('summary', null, 'Raw JSON'), el('pre', { id: 'raw-json' }, JSON.stringify(saga, null, 2)));
      raw.addEventListener('toggle', () => { opened = raw.open; });
      replace(body,
        el('div.page-head', null,
          el('div', null,
            el('h1', null, 'Saga ', el('span.mono.saga-id', null, saga.sagaId)),
            el('p.muted', null, badge(saga.state), ' version ', String(saga.version),
              ' · took ', fmtDuration(last - created), TERMINAL.has(saga.state) ? '' : ' so far',
              saga.deadlineAt && !TERMINAL.has(saga.state)
                ? [' · step deadline ', timeEl(saga.deadlineAt)] : null)),
          el('div.actions', null, actions)),
        saga.cancellation ? el('div.notice.cancelled', { id: 'cancellation' },
          el('strong', null, 'Cancelled by an operator'), ' at ', timeEl(saga.cancellation.at),
          ': ', el('q', null, saga.cancellation.reason)) : null,
        el('dl.summary', null,
          [['Customer', el('span.cust', null, saga.customerId)], ['Item', saga.itemId],
            ['Qty', fmtNumber(saga.qty)], ['Amount', fmtNumber(saga.amount)],
            ['Created', timeEl(saga.createdAt)], ['Updated', timeEl(saga.updatedAt)]]
            .map(([k, v]) => el('div', null, el('dt', null, k), el('dd', null, v)))),
        el('div.cols', null,
          el('section.card.timeline-card', { 'aria-labelledby': 'tl-title' },
            el('h2', { id: 'tl-title' }, 'Timeline'),
            el('ol.timeline', { id: 'timeline' }, rows),
            others.length ? el('div.others', null, el('h3', null, 'Other messages'),
              el('ul.msgs', null, others.map(messageRow))) : null),
          el('div.side', null,
            el('section.card', { 'aria-labelledby': 'pay-title' },
              el('h2', { id: 'pay-title' }, 'Payment'), kvTable(saga.payment, 'Payment row')),
            el('section.card', { 'aria-labelledby': 'res-title' },
              el('h2', { id: 'res-title' }, 'Reservation'), kvTable(saga.reservation, 'Reservation row')))),
        raw);
    }

    async function refresh() {
      try {
        const saga = await api('GET', '/admin/api/sagas/' + encodeURIComponent(id));
        replace(status, partialBox(saga));
        render(saga);
      } catch (e) {
        replace(status, errorBox(e.status === 404 ? new ApiError(404, 'not_found', 'No saga with this id.') : e));
        replace(body);
      }
    }
    return { node, refresh };
  }

  // --- dead letters -----------------------------------------------------------

  const groupKey = (g) => JSON.stringify([g.service, g.type, g.lastError || '']);

  function deadLetterView(params) {
    document.title = 'Dead letters · pgsaga console';
    const f = { service: params.get('service') || '', type: params.get('type') || '',
      q: params.get('q') || '' };
    const open = new Set();       // group keys shown expanded
    const picked = new Map();     // group key -> Set of message ids
    let data = { deadLetters: [], groups: [] };
    const status = el('div.status-area');
    const list = el('div.groups', { id: 'dl-groups' });

    const svcSelect = el('select.input', { id: 'dl-service', name: 'service' },
      el('option', { value: '' }, 'All services'),
      SERVICES.map((s) => el('option', { value: s }, s)));
    svcSelect.value = f.service;
    const form = el('form.filters', { id: 'dl-filters', 'aria-label': 'Filters' },
      el('div.fld', null, el('label.field', { for: 'dl-service' }, 'Service'), svcSelect),
      el('div.fld', null, el('label.field', { for: 'dl-type' }, 'Type'),
        el('input.input', { id: 'dl-type', name: 'type', value: f.type, placeholder: 'PayCommand', spellcheck: 'false' })),
      el('div.fld.grow', null, el('label.field', { for: 'dl-q' }, 'Error text contains'),
        el('input.input', { id: 'dl-q', name: 'q', type: 'search', value: f.q, placeholder: 'e.g. 404', spellcheck: 'false' })),
      el('div.fld.fld-buttons', null, el('button.btn.primary', { type: 'submit' }, 'Apply')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      go('#/dead-letters' + query({ service: fd.get('service'), type: String(fd.get('type') || '').trim(),
        q: String(fd.get('q') || '').trim() }));
    });

    async function retry(service, ids, what) {
      const n = ids.length;
      const ok = await ask({
        title: 'Retry ' + n + (n === 1 ? ' dead letter?' : ' dead letters?'),
        body: what + ': ' + n + (n === 1 ? ' message goes' : ' messages go') +
          ' back to pending with their attempts reset and are delivered again at once. ' +
          'Receivers deduplicate by message id, so a message that did arrive has no second effect.',
        okLabel: 'Retry ' + n, cancelLabel: 'Cancel',
      });
      if (ok === null) return;
      try {
        const r = await api('POST', '/admin/api/dead-letters/retry', { service, messageIds: ids });
        const done = typeof r.retried === 'number' ? r.retried : n;
        toast('Retried ' + done + (done === 1 ? ' message.' : ' messages.'));
      } catch (e) {
        toast(e.message, 'error');
      }
      for (const set of picked.values()) for (const id of ids) set.delete(id);
      await refresh();
    }

    function groupNode(g, letters) {
      const key = groupKey(g);
      const sel = picked.get(key) || new Set();
      picked.set(key, sel);
      for (const id of Array.from(sel)) if (!letters.some((d) => d.messageId === id)) sel.delete(id);
      const isOpen = open.has(key);
      const bodyId = 'g-' + Math.abs(hash(key)).toString(36);
      const selBtn = el('button.btn.small', { type: 'button', class: 'retry-selected', disabled: sel.size === 0,
        onclick: () => retry(g.service, Array.from(sel), 'The selected messages of ' + g.service + ' / ' + g.type) },
      'Retry selected (' + sel.size + ')');
      const rows = letters.map((d) => {
        const cb = el('input', { type: 'checkbox', checked: sel.has(d.messageId), dataset: { focusKey: d.messageId },
          'aria-label': 'Select message ' + d.messageId });
        cb.addEventListener('change', () => {
          if (cb.checked) sel.add(d.messageId); else sel.delete(d.messageId);
          replace(selBtn, 'Retry selected (' + sel.size + ')');
          selBtn.disabled = sel.size === 0;
        });
        return el('tr', { dataset: { messageId: d.messageId } },
          el('td.pick', { 'data-label': 'Select' }, cb),
          el('td', { 'data-label': 'Message' }, mono(shortId(d.messageId), d.messageId)),
          el('td', { 'data-label': 'Saga' }, sagaLink(d.sagaId)),
          el('td', { 'data-label': 'To' }, d.destination || '—'),
          el('td.num', { 'data-label': 'Attempts' }, fmtNumber(d.attemptCount)),
          el('td', { 'data-label': 'Dead at' }, timeEl(d.deadAt)),
          el('td.act', { 'data-label': '' }, el('button.btn.small', { type: 'button', class: 'retry-one',
            onclick: () => retry(d.service || g.service, [d.messageId], 'Message ' + shortId(d.messageId)) }, 'Retry')));
      });
      const toggle = el('button.btn.ghost.small', { type: 'button', 'aria-expanded': isOpen ? 'true' : 'false',
        'aria-controls': bodyId, class: 'group-toggle', dataset: { focusKey: key + ':toggle' },
        onclick: () => { if (open.has(key)) open.delete(key); else open.add(key); draw(); } },
      isOpen ? 'Hide messages' : 'Show messages');
      const ids = letters.map((d) => d.messageId);
      const unlisted = (Number(g.count) || 0) - ids.length;
      return el('article.group.card', { dataset: { service: g.service, type: g.type, count: g.count } },
        el('div.group-head', null,
          el('div.group-title', null,
            el('span.svc-tag', null, g.service), el('span.type', null, g.type),
            el('span.count-pill', { title: 'dead letters in this group' }, fmtNumber(g.count))),
          el('div.group-actions', null, toggle,
            el('button.btn.small.primary', { type: 'button', class: 'retry-group', disabled: ids.length === 0,
              onclick: () => retry(g.service, ids, 'Every listed message of ' + g.service + ' / ' + g.type +
                ' with this error' + (unlisted > 0 ? ' (' + unlisted + ' more are not listed: retry again after)' : '')) },
            'Retry group (' + ids.length + ')'))),
        el('pre.err', null, g.lastError || '(no error text)'),
        isOpen ? el('div.group-body', { id: bodyId },
          el('div.table-wrap', null, el('table.grid.cards.compact', null,
            el('thead', null, el('tr', null, ['', 'Message', 'Saga', 'To', 'Attempts', 'Dead at', ''].map((t, i) =>
              el('th', { scope: 'col', class: i === 4 ? 'num' : null }, i === 0 ? el('span.sr-only', null, 'Select') : t)))),
            el('tbody', null, rows))),
          el('div.group-foot', null, selBtn)) : null);
    }

    function draw() {
      // A redraw (after a toggle, a retry or an auto-refresh) keeps the
      // keyboard focus on the same control.
      const focused = document.activeElement && document.activeElement.dataset
        ? document.activeElement.dataset.focusKey : null;
      const letters = Array.isArray(data.deadLetters) ? data.deadLetters : [];
      let groups = Array.isArray(data.groups) ? data.groups : [];
      const q = f.q.toLowerCase();
      if (q) groups = groups.filter((g) => String(g.lastError || '').toLowerCase().includes(q));
      if (!groups.length) {
        replace(list, el('div.empty', null, el('p', null, f.q || f.service || f.type
          ? 'No dead letters match these filters.'
          : 'No dead letters. Every message was delivered or is still being retried.')));
        return;
      }
      const total = groups.reduce((a, g) => a + (Number(g.count) || 0), 0);
      replace(list,
        el('p.muted.summary-line', null, fmtNumber(total) + (total === 1 ? ' dead letter in ' : ' dead letters in ') +
          groups.length + (groups.length === 1 ? ' group' : ' groups') + ', grouped by service, type and error.'),
        groups.map((g) => groupNode(g, letters.filter((d) =>
          (d.service || '') === g.service && d.type === g.type && (d.lastError || '') === (g.lastError || '')))));
      if (focused) {
        const again = Array.from(list.querySelectorAll('[data-focus-key]'))
          .find((e) => e.dataset.focusKey === focused);
        if (again) again.focus();
      }
    }

    async function refresh() {
      try {
        data = await api('GET', '/admin/api/dead-letters' + query({ service: f.service, type: f.type }));
        replace(status, partialBox(data));
        draw();
      } catch (e) {
        replace(status, errorBox(e));
      }
    }

    const box = el('details.filter-box', { open: window.innerWidth > 640 || f.service || f.type || f.q || null },
      el('summary', null, 'Filters'), form);
    const node = el('section.page', { id: 'page-dead-letters' },
      pageHead('Dead letters', 'Messages that were refused or ran out of attempts. Fix the cause, then retry.'),
      box, status, list);
    return { node, refresh };
  }

  function hash(s) {
    let x = 0;
    for (let i = 0; i < s.length; i++) x = (x * 31 + s.charCodeAt(i)) | 0;
    return x;
  }

  // --- deliveries -----------------------------------------------------------------

  function deliveryView() {
    document.title = 'Deliveries · pgsaga console';
    const status = el('div.status-area');
    const results = el('div.results');

    function breaker(b) {
      const cls = b === 'open' ? 'bad' : b === 'half_open' ? 'warn' : b === 'closed' ? 'good' : 'unknown';
      return el('span.pill', { class: cls }, b ? String(b).replace('_', '-') : '—');
    }

    function render(data) {
      const rows = Array.isArray(data.deliveries) ? data.deliveries : Array.isArray(data) ? data : [];
      if (!rows.length) return el('div.empty', null, el('p', null, 'No delivery data.'));
      const head = el('thead', null, el('tr', null, ['Service', 'Destination', 'Pending', 'Leased', 'Dead',
        'Oldest pending', 'Breaker'].map((t, i) => el('th', { scope: 'col', class: i >= 2 && i <= 5 ? 'num' : null }, t))));
      const body = el('tbody', null, rows.map((r) => el('tr', { dataset: { service: r.service, destination: r.destination } },
        el('td', { 'data-label': 'Service' }, el('span.svc-tag', null, r.service)),
        el('td', { 'data-label': 'Destination' }, r.destination),
        el('td.num', { 'data-label': 'Pending', class: r.pending > 0 ? 'hot' : null }, fmtNumber(r.pending)),
        el('td.num', { 'data-label': 'Leased' }, fmtNumber(r.leased)),
        el('td.num', { 'data-label': 'Dead', class: r.dead > 0 ? 'bad-text' : null },
          r.dead > 0 ? el('a', { href: '#/dead-letters' + query({ service: r.service }) }, fmtNumber(r.dead)) : fmtNumber(r.dead)),
        el('td.num', { 'data-label': 'Oldest pending' },
          !r.pending || r.oldestPendingSeconds === null || r.oldestPendingSeconds === undefined
            ? '—' : fmtDuration(r.oldestPendingSeconds * 1000)),
        el('td', { 'data-label': 'Breaker' }, breaker(r.breaker)))));
      return el('div.table-wrap', null, el('table.grid.cards', { id: 'delivery-table' },
        el('caption.sr-only', null, 'Outbox delivery per service and destination'), head, body));
    }

    async function refresh() {
      try {
        const data = await api('GET', '/admin/api/deliveries');
        replace(status, partialBox(data));
        replace(results, render(data));
      } catch (e) {
        replace(status, errorBox(e));
      }
    }
    const node = el('section.page', { id: 'page-deliveries' },
      pageHead('Deliveries', 'Each service\'s outbox, per destination: what waits, what is in flight, what died, and the circuit breaker.'),
      status, results);
    return { node, refresh };
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

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
}());
