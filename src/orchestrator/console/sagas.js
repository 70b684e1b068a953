/*
 * The saga pages of the console: the list (#/sagas?filters) and one saga
 * (#/sagas/{id}) with its definition's steps, its timeline and Cancel.
 * Sagas of every definition: what a saga's steps are comes from its own
 * definition (definitions.js), never from this file. See console.js for
 * the frame and the rule that data goes into the page as text only.
 */
'use strict';

(function (P) {
  const { el, replace, timeEl, fmtDuration, fmtNumber, badge, mono, shortId, sagaLink,
    ApiError, api, query, toast, errorBox, partialBox, ask, go, pageHead,
    STATES, TERMINAL, FAILURES } = P;

  const DEFAULT_LIMIT = '50';
  // The saga list's cursor paging goes forward only: the cursors of the
  // pages before this one are kept here, for as long as the filters stay.
  const paging = { cursors: [], key: '' };

  // --- the list ---------------------------------------------------------------

  function listFilters(params) {
    const f = {};
    for (const k of ['state', 'definition', 'customerId', 'itemId', 'since', 'until', 'stuck',
      'cursor']) {
      f[k] = params.get(k) || '';
    }
    f.limit = params.get('limit') || DEFAULT_LIMIT;
    return f;
  }

  /* The address of the list with these filters changed (first page). */
  function listHash(f, changes) {
    const next = Object.assign({}, f, { cursor: '' }, changes);
    if (next.limit === DEFAULT_LIMIT) next.limit = '';
    return '#/sagas' + query(next);
  }

  /* The definition select, its options filled once the definitions are read. */
  function definitionSelect(f) {
    const sel = el('select.input', { id: 'f-definition', name: 'definition' },
      el('option', { value: '' }, 'All definitions'),
      f.definition ? el('option', { value: f.definition }, f.definition) : null);
    sel.value = f.definition;
    P.definitionNames().then((defs) => {
      const names = defs.map((d) => d.name);
      if (f.definition && !names.includes(f.definition)) names.push(f.definition);
      replace(sel, el('option', { value: '' }, 'All definitions'),
        names.map((n) => el('option', { value: n }, n)));
      sel.value = f.definition;
      sel.dataset.loaded = 'true';
    }, () => { sel.dataset.loaded = 'failed'; });
    return sel;
  }

  function filterForm(f) {
    const input = (name, label, attrs) => el('div.fld', null,
      el('label.field', { for: 'f-' + name }, label),
      el('input.input', Object.assign({ id: 'f-' + name, name, value: f[name] }, attrs)));
    const defSel = definitionSelect(f);
    const form = el('form.filters', { id: 'filters', 'aria-label': 'Filters' },
      el('div.fld', null, el('label.field', { for: 'f-definition' }, 'Definition'), defSel),
      input('customerId', 'Customer', { placeholder: 'c-1', autocomplete: 'off', spellcheck: 'false' }),
      input('itemId', 'Item', { placeholder: 'A001', autocomplete: 'off', spellcheck: 'false' }),
      input('since', 'Created since', { type: 'datetime-local', step: 1 }),
      input('until', 'Created until', { type: 'datetime-local', step: 1 }),
      input('stuck', 'Stuck over (min)',
        { type: 'number', min: 1, step: 1, placeholder: 'e.g. 5', inputmode: 'numeric' }),
      el('div.fld.fld-buttons', null,
        el('button.btn.primary', { type: 'submit' }, 'Apply'),
        el('button.btn', { type: 'button', id: 'f-reset', onclick: () => go('#/sagas') }, 'Reset')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      const changes = {};
      for (const k of ['definition', 'customerId', 'itemId', 'since', 'until', 'stuck']) {
        changes[k] = String(fd.get(k) || '').trim();
      }
      go(listHash(f, changes));
    });
    // a choice of definition applies at once, with what else the form holds
    defSel.addEventListener('change', () => form.requestSubmit());
    return form;
  }

  function stateChips(f, counts) {
    const n = (s) => Number(counts[s] || 0);
    const chip = (value, label, count) => el('a.chip', {
      href: listHash(f, { state: value }), class: value ? 'st-' + value.replace(',', '-') : null,
      'aria-current': f.state === value ? 'true' : null,
      dataset: { state: value === FAILURES ? 'failures' : value || 'all' },
    }, el('span', null, label), el('span.count', null, fmtNumber(count)));
    // Other definitions' running states come after the order saga's.
    // With a definition chosen, the order saga's running states at zero
    // are left out: they are not that definition's.
    const others = Object.keys(counts).filter((s) => !STATES.includes(s));
    const shown = (s) => !f.definition || n(s) > 0 || f.state === s || !s.startsWith('Pending');
    const order = [STATES[0], STATES[1], ...others, ...STATES.slice(2)].filter(shown);
    return [chip('', 'All', Object.keys(counts).reduce((a, s) => a + n(s), 0)),
      order.map((s) => chip(s, s, n(s))),
      chip(FAILURES, 'Failures', n('Failed') + n('Compensated'))];
  }

  /* "stock-first v2": a saga's definition, as the list and its page show it. */
  function definitionLabel(d) {
    return d ? [el('span.def-name', null, d.name), el('span.def-ver', null, ' v' + d.version)] : '—';
  }

  function sagaRow(s, now) {
    const idle = s.updatedAt ? now - new Date(s.updatedAt).getTime() : null;
    return el('tr', { dataset: { sagaId: s.sagaId } },
      el('td', { 'data-label': 'Saga' }, sagaLink(s.sagaId)),
      el('td.def', { 'data-label': 'Definition' }, definitionLabel(s.definition)),
      el('td', { 'data-label': 'State' }, badge(s.state),
        !TERMINAL.has(s.state) && idle !== null && idle > 60000
          ? el('span.idle', { title: 'not updated for ' + fmtDuration(idle) }, ' idle ' + fmtDuration(idle))
          : null),
      // the order saga's columns: other definitions have none
      el('td.cust', { 'data-label': 'Customer' }, s.customerId ?? '—'),
      el('td', { 'data-label': 'Item' }, s.itemId ?? '—'),
      el('td.num', { 'data-label': 'Qty' }, fmtNumber(s.qty)),
      el('td.num', { 'data-label': 'Amount' }, fmtNumber(s.amount)),
      el('td', { 'data-label': 'Created' }, timeEl(s.createdAt)),
      el('td', { 'data-label': 'Updated' }, timeEl(s.updatedAt)));
  }

  function sagaTable(sagas) {
    if (!sagas.length) return el('div.empty', null, el('p', null, 'No saga matches these filters.'));
    const now = Date.now();
    const head = el('thead', null, el('tr', null,
      ['Saga', 'Definition', 'State', 'Customer', 'Item', 'Qty', 'Amount', 'Created', 'Updated'].map((t) =>
        el('th', { scope: 'col', class: ['Qty', 'Amount'].includes(t) ? 'num' : null }, t))));
    return el('div.table-wrap', null, el('table.grid.cards', { id: 'saga-table' },
      el('caption.sr-only', null, 'Sagas, newest first'), head,
      el('tbody', null, sagas.map((s) => sagaRow(s, now)))));
  }

  function pagerParts(f, next, shown) {
    const page = paging.cursors.length + 1;
    const newer = () => {
      const prev = paging.cursors.pop();
      go(listHash(f, { cursor: prev || '' }));
    };
    const older = () => {
      paging.cursors.push(f.cursor);
      go(listHash(f, { cursor: next }));
    };
    return [el('span.muted', null, 'Page ' + page + ' · ' + shown + (shown === 1 ? ' saga' : ' sagas')),
      el('span.pager-btns', null,
        page > 1 ? el('a.btn.small', { href: listHash(f, {}), id: 'page-first' }, 'First') : null,
        page > 1 ? el('button.btn.small', { type: 'button', id: 'page-prev', onclick: newer }, '← Newer') : null,
        next ? el('button.btn.small', { type: 'button', id: 'page-next', onclick: older }, 'Older →') : null)];
  }

  function listQuery(f) {
    return query({
      state: f.state, definition: f.definition, customerId: f.customerId, itemId: f.itemId,
      since: f.since ? new Date(f.since).toISOString() : '',
      until: f.until ? new Date(f.until).toISOString() : '',
      stuckSeconds: f.stuck ? Math.round(Number(f.stuck) * 60) : '',
      limit: f.limit, cursor: f.cursor,
    });
  }

  function listView(parts, params) {
    document.title = 'Sagas · pgsaga console';
    const f = listFilters(params);
    const key = JSON.stringify([f.state, f.definition, f.customerId, f.itemId, f.since, f.until,
      f.stuck, f.limit]);
    if (paging.key !== key || !f.cursor) {
      paging.cursors = [];
      paging.key = key;
    }
    const chips = el('div.chips', { role: 'group', 'aria-label': 'Filter by state' });
    const status = el('div.status-area');
    const results = el('div.results', { 'aria-live': 'polite' });
    const pager = el('nav.pager', { 'aria-label': 'Pages' });

    async function refresh() {
      try {
        const data = await api('GET', '/admin/api/sagas' + listQuery(f));
        const sagas = Array.isArray(data.sagas) ? data.sagas : [];
        replace(chips, stateChips(f, data.counts || {}));
        replace(status, partialBox(data));
        replace(results, sagaTable(sagas));
        replace(pager, pagerParts(f, data.next, sagas.length));
      } catch (e) {
        replace(status, errorBox(e));
      }
    }

    const active = [f.definition && 'definition ' + f.definition, f.state && 'state ' + f.state,
      f.customerId && 'customer ' + f.customerId,
      f.itemId && 'item ' + f.itemId, f.stuck && 'stuck > ' + f.stuck + ' min'].filter(Boolean);
    // On a phone the filters fold away unless one is set.
    const box = el('details.filter-box', { open: window.innerWidth > 640 || active.length > 0 || null },
      el('summary', null, 'Filters'), filterForm(f));
    const node = el('section.page', { id: 'page-sagas' },
      pageHead('Sagas', active.length ? 'Newest first · ' + active.join(' · ') : 'Newest first'),
      chips, box, status, results, pager);
    return { node, refresh };
  }

  // --- one saga: its timeline -------------------------------------------------

  /*
   * Which state of the saga a message belongs to, by its type, from the
   * saga's definition: a step's command and its answers to the step's
   * Pending<Step>, its compensation and the answer to Compensating.
   */
  function stateOfType(def) {
    const m = {};
    for (const st of (def && Array.isArray(def.steps)) ? def.steps : []) {
      for (const t of [st.command, st.succeeded, st.failed]) m[t] = 'Pending' + st.name;
      for (const t of [st.compensation, st.compensated]) m[t] = 'Compensating';
    }
    return m;
  }

  // The order saga names the undo it awaits as 1.0 did (its compensation
  // column); the other definitions by the step's name.
  const ORDER_UNDO = { release: 'Inventory', refund: 'Payment' };

  /*
   * What each step of the saga's definition did, from its history: step
   * name -> {state, label}, drawn on the step's box. A step leaves its
   * Pending<Step> by its succeeded or failed event, or by a deadline or a
   * cancellation; its compensated event says it was undone.
   */
  function stepStatus(saga, def) {
    const hist = Array.isArray(saga.history) ? saga.history : [];
    const out = {};
    for (const st of Array.isArray(def.steps) ? def.steps : []) {
      const pending = 'Pending' + st.name;
      const left = hist.find((h) => h.fromState === pending && h.toState !== pending);
      let v = { state: 'idle', label: 'not reached' };
      if (hist.some((h) => h.toState === pending)) v = { state: 'running', label: 'running' };
      if (left) {
        v = left.cause === st.succeeded ? { state: 'done', label: 'done' }
          : { state: 'failed', label: left.cause === st.failed ? 'failed'
            : left.cause === 'StepTimeout' ? 'timed out'
              : left.cause === 'Cancelled' ? 'cancelled' : String(left.cause) };
      }
      const awaited = def.name === 'order' ? ORDER_UNDO[saga.compensation] : saga.compensation;
      if (saga.state === 'Compensating' && awaited === st.name) v = { state: 'undoing', label: 'undoing' };
      if (hist.some((h) => h.cause === st.compensated)) v = { state: 'undone', label: 'undone' };
      out[st.name] = v;
    }
    return out;
  }

  const KIND_LABEL = { forward: 'forward', compensation: 'compensation', failure: 'failed', done: 'done' };

  function stepKind(h) {
    if (h.cause === 'Cancelled' || h.cause === 'StepTimeout' ||
        h.toState === 'Compensating' || h.toState === 'Compensated') return 'compensation';
    if (h.toState === 'Failed') return 'failure';
    if (h.toState === 'Completed') return 'done';
    return 'forward';
  }

  function messageRow(m) {
    const dead = Boolean(m.deadAt);
    const incoming = m.direction === 'in';
    const status = dead ? el('span.msg-status.dead', null, 'dead ', timeEl(m.deadAt))
      : m.processedAt ? el('span.msg-status.ok', null, 'done ', timeEl(m.processedAt))
        : el('span.msg-status.wait', null, 'pending');
    return el('li.msg', { class: dead ? 'is-dead' : null, dataset: { messageId: m.messageId || '' } },
      el('div.msg-line', null,
        el('span.dir', { class: incoming ? 'in' : 'out', title: incoming ? 'received (inbox)' : 'sent (outbox)' },
          incoming ? 'in' : 'out'),
        el('span.svc', null, m.service),
        el('span.type', null, m.type || '—'),
        !incoming && m.attemptCount > 0 ? el('span.attempts', null,
          m.attemptCount + (m.attemptCount === 1 ? ' failed attempt' : ' failed attempts')) : null,
        status,
        el('span.mono.msgid', { title: m.messageId }, shortId(m.messageId))),
      m.lastError ? el('pre.err', null, m.lastError) : null);
  }

  /*
   * A message's rows (the sender's outbox row, the receiver's inbox row)
   * next to each other, sender first; messages in the order they were
   * first seen.
   */
  function orderMessages(list) {
    const first = new Map();
    for (const m of list) {
      const t = String(m.processedAt || m.deadAt || '~');
      if (!first.has(m.messageId) || t < first.get(m.messageId)) first.set(m.messageId, t);
    }
    return list.slice().sort((a, b) =>
      first.get(a.messageId).localeCompare(first.get(b.messageId)) ||
      String(a.messageId).localeCompare(String(b.messageId)) ||
      (a.direction === 'out' ? -1 : 1) - (b.direction === 'out' ? -1 : 1));
  }

  function stepRow(h, next, end, mine) {
    const kind = stepKind(h);
    const stop = next ? new Date(next.at).getTime() : end;
    const dur = stop === null ? null : stop - new Date(h.at).getTime();
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
  }

  /* One row per history entry, with the messages of the state it entered. */
  function timeline(saga, def) {
    const stateOf = stateOfType(def);
    const hist = (Array.isArray(saga.history) ? saga.history.slice() : [])
      .sort((a, b) => (a.version || 0) - (b.version || 0));
    const msgs = orderMessages(Array.isArray(saga.messages) ? saga.messages : []);
    const used = new Set();
    const end = TERMINAL.has(saga.state) ? null : Date.now();
    const rows = hist.map((h, i) => {
      // The step's command out and the answer that ended it. A state
      // entered twice (Compensating after a release) shows them once.
      const mine = [];
      msgs.forEach((m, j) => {
        if (!used.has(j) && stateOf[m.type] === h.toState) {
          used.add(j);
          mine.push(m);
        }
      });
      return stepRow(h, hist[i + 1], end, mine);
    });
    return { rows, others: msgs.filter((m, j) => !used.has(j)) };
  }

  // --- one saga: the page -----------------------------------------------------

  function kvTable(obj, caption) {
    if (!obj) return el('p.muted', null, 'None.');
    const value = (k, v) => v !== null && typeof v === 'object' ? JSON.stringify(v)
      : /(At|_at)$/.test(k) && typeof v === 'string' ? timeEl(v) : (v === null ? '—' : String(v));
    return el('table.kv', null, el('caption.sr-only', null, caption),
      el('tbody', null, Object.entries(obj).map(([k, v]) => el('tr', null,
        el('th', { scope: 'row' }, k), el('td', null, value(k, v))))));
  }

  async function cancelSaga(saga, def, after) {
    const st = def ? stepStatus(saga, def) : {};
    const ran = Object.keys(st).filter((k) => st[k].state === 'done' || st[k].state === 'running');
    const reason = await ask({
      title: 'Cancel saga ' + shortId(saga.sagaId) + '?',
      body: 'It stops where it is and undoes the steps that have run' +
        (ran.length ? ' (' + ran.join(', ') + '), last first,' : '') +
        ' exactly as on a step deadline. This cannot be undone.',
      field: { label: 'Reason (recorded with the saga)', required: true,
        placeholder: 'e.g. customer asked to cancel' },
      cancelLabel: 'Keep saga', okLabel: 'Cancel saga', danger: true,
    });
    if (reason === null) return;
    try {
      const r = await api('POST', '/admin/api/sagas/' + encodeURIComponent(saga.sagaId) + '/cancel',
        { reason });
      toast(r.cancelled === false ? 'The saga was already cancelled.'
        : 'Cancelled: the saga compensates what has run.');
    } catch (e) {
      toast(e.code === 'saga_finished' ? 'The saga had already finished.' : e.message, 'error');
    }
    await after();
  }

  function sagaHead(saga, onCancel) {
    const d = saga.definition;
    const done = TERMINAL.has(saga.state);
    const took = (done ? new Date(saga.updatedAt).getTime() : Date.now()) - new Date(saga.createdAt).getTime();
    return el('div.page-head', null,
      el('div', null,
        el('h1', null, 'Saga ', el('span.mono.saga-id', null, saga.sagaId)),
        el('p.muted', null, badge(saga.state),
          d ? [' ', el('a.def-label', { href: '#/definitions', title: 'its definition' },
            definitionLabel(d))] : null,
          ' · saga version ', String(saga.version),
          ' · took ', fmtDuration(took), done ? '' : ' so far',
          saga.deadlineAt && !done ? [' · step deadline ', timeEl(saga.deadlineAt)] : null)),
      el('div.actions', null,
        done ? null : el('button.btn.danger', { type: 'button', id: 'cancel-saga', onclick: onCancel },
          'Cancel saga…'),
        el('a.btn', { href: '#/sagas/' + encodeURIComponent(saga.sagaId), id: 'deep-link',
          title: 'Link to this page' }, 'Link')));
  }

  /* The saga's input: the order saga's four columns, or its input's fields. */
  function summary(saga, isOrder) {
    const input = saga.input && typeof saga.input === 'object' ? saga.input : {};
    const fields = isOrder
      ? [['Customer', el('span.cust', null, saga.customerId)], ['Item', saga.itemId],
        ['Qty', fmtNumber(saga.qty)], ['Amount', fmtNumber(saga.amount)]]
      : Object.entries(input).map(([k, v]) => [k, v === '' ? el('span.muted', null, '(empty)')
        : el('span.in-val', null, typeof v === 'number' ? fmtNumber(v) : String(v))]);
    const item = (k, v, key) => el('div', null, el('dt', { class: key ? 'in-key' : null }, k),
      el('dd', null, v));
    return el('dl.summary', { class: isOrder ? null : 'any', id: 'saga-input' },
      fields.map(([k, v]) => item(k, v, !isOrder)),
      item('Created', timeEl(saga.createdAt)), item('Updated', timeEl(saga.updatedAt)));
  }

  /* Its definition's steps, each marked with what it did. */
  function stepsCard(saga, def) {
    const d = saga.definition || {};
    return el('section.card.steps-card', { id: 'saga-steps', 'aria-labelledby': 'steps-title' },
      el('h2', { id: 'steps-title' }, 'Steps of ', definitionLabel(d)),
      def ? P.stepLine(def, stepStatus(saga, def))
        : el('p.muted', null, 'Its definition could not be read: the messages are listed apart.'));
  }

  function outputsCard(saga) {
    const outs = saga.outputs && typeof saga.outputs === 'object' ? saga.outputs : {};
    const steps = Object.keys(outs);
    return el('section.card', { id: 'saga-outputs', 'aria-labelledby': 'out-title' },
      el('h2', { id: 'out-title' }, 'Outputs'),
      steps.length ? steps.map((k) => [el('h3', null, k), kvTable(outs[k], 'Output of ' + k)])
        : el('p.muted', null, 'None.'));
  }

  function sagaBody(saga, def) {
    const isOrder = !saga.definition || saga.definition.name === 'order';
    const { rows, others } = timeline(saga, def);
    // the peers' rows: always for the order saga, else when a peer has one
    const peers = [['pay-title', 'Payment', saga.payment], ['res-title', 'Reservation', saga.reservation]]
      .filter(([, , row]) => isOrder || row)
      .map(([id, title, row]) => el('section.card', { 'aria-labelledby': id },
        el('h2', { id }, title), kvTable(row, title + ' row')));
    return [
      saga.cancellation ? el('div.notice.cancelled', { id: 'cancellation' },
        el('strong', null, 'Cancelled by an operator'), ' at ', timeEl(saga.cancellation.at),
        ': ', el('q', null, saga.cancellation.reason)) : null,
      summary(saga, isOrder),
      stepsCard(saga, def),
      el('div.cols', null,
        el('section.card.timeline-card', { 'aria-labelledby': 'tl-title' },
          el('h2', { id: 'tl-title' }, 'Timeline'),
          el('ol.timeline', { id: 'timeline' }, rows),
          others.length ? el('div.others', null, el('h3', null, 'Other messages'),
            el('ul.msgs', null, others.map(messageRow))) : null),
        el('div.side', null, isOrder ? null : outputsCard(saga), peers))];
  }

  function sagaView(parts) {
    const id = parts[0];
    document.title = 'Saga ' + shortId(id) + ' · pgsaga console';
    const body = el('div.saga-body');
    const status = el('div.status-area');
    const node = el('section.page', { id: 'page-saga' },
      el('nav.crumbs', { 'aria-label': 'Breadcrumb' }, el('a', { href: '#/sagas' }, 'Sagas'), ' / ',
        el('span.mono', null, id)),
      status, body);
    let rawOpen = false; // kept across refreshes

    async function refresh() {
      let saga;
      try {
        saga = await api('GET', '/admin/api/sagas/' + encodeURIComponent(id));
      } catch (e) {
        replace(status, errorBox(e.status === 404 ? new ApiError(404, 'not_found', 'No saga with this id.') : e));
        replace(body);
        return;
      }
      const d = saga.definition;
      // without its definition the page still shows the history and messages
      const def = d ? await P.definition(d.name, d.version).catch(() => null) : null;
      const raw = el('details.raw', { open: rawOpen || null },
        el('summary', null, 'Raw JSON'), el('pre', { id: 'raw-json' }, JSON.stringify(saga, null, 2)));
      raw.addEventListener('toggle', () => { rawOpen = raw.open; });
      replace(status, partialBox(saga));
      replace(body, sagaHead(saga, () => cancelSaga(saga, def, refresh)), sagaBody(saga, def), raw);
    }
    return { node, refresh };
  }

  P.views.sagas = (parts, params) => (parts[0] ? sagaView(parts) : listView(parts, params));
}(window.pgsaga));
