/*
 * The delivery pages of the console: dead letters grouped, with retry
 * (#/dead-letters?service=&type=&q=), and each outbox's health per peer
 * (#/deliveries). See console.js for the frame and the rule that data goes
 * into the page as text only.
 */
'use strict';

(function (P) {
  const { el, replace, timeEl, fmtDuration, fmtNumber, mono, shortId, sagaLink,
    api, query, toast, errorBox, partialBox, ask, go, pageHead, SERVICES } = P;

  // --- dead letters -------------------------------------------------------------

  const groupKey = (g) => JSON.stringify([g.service, g.type, g.lastError || '']);

  function inGroup(g) {
    return (d) => (d.service || '') === g.service && d.type === g.type &&
      (d.lastError || '') === (g.lastError || '');
  }

  function dlFilterForm(f) {
    const svc = el('select.input', { id: 'dl-service', name: 'service' },
      el('option', { value: '' }, 'All services'),
      SERVICES.map((s) => el('option', { value: s }, s)));
    svc.value = f.service;
    const form = el('form.filters', { id: 'dl-filters', 'aria-label': 'Filters' },
      el('div.fld', null, el('label.field', { for: 'dl-service' }, 'Service'), svc),
      el('div.fld', null, el('label.field', { for: 'dl-type' }, 'Type'),
        el('input.input', { id: 'dl-type', name: 'type', value: f.type, placeholder: 'PayCommand',
          spellcheck: 'false' })),
      el('div.fld.grow', null, el('label.field', { for: 'dl-q' }, 'Error text contains'),
        el('input.input', { id: 'dl-q', name: 'q', type: 'search', value: f.q, placeholder: 'e.g. 404',
          spellcheck: 'false' })),
      el('div.fld.fld-buttons', null, el('button.btn.primary', { type: 'submit' }, 'Apply')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      go('#/dead-letters' + query({ service: fd.get('service'), type: String(fd.get('type') || '').trim(),
        q: String(fd.get('q') || '').trim() }));
    });
    return form;
  }

  /* Asks, then retries; resolves when done (or dismissed). */
  async function retry(service, ids, what) {
    const n = ids.length;
    const ok = await ask({
      title: 'Retry ' + n + (n === 1 ? ' dead letter?' : ' dead letters?'),
      body: what + ': ' + n + (n === 1 ? ' message goes' : ' messages go') +
        ' back to pending with their attempts reset and are delivered again at once. ' +
        'Receivers deduplicate by message id, so a message that did arrive has no second effect.',
      okLabel: 'Retry ' + n, cancelLabel: 'Cancel',
    });
    if (ok === null) return false;
    try {
      const r = await api('POST', '/admin/api/dead-letters/retry', { service, messageIds: ids });
      const done = typeof r.retried === 'number' ? r.retried : n;
      toast('Retried ' + done + (done === 1 ? ' message.' : ' messages.'));
    } catch (e) {
      toast(e.message, 'error');
    }
    return true;
  }

  /*
   * The table of a group's dead letters. sel (the selected message ids)
   * changes as boxes are ticked; onPick(sel) follows; onRetry(ids, what)
   * retries.
   */
  function letterTable(g, letters, sel, onPick, onRetry) {
    const rows = letters.map((d) => {
      const cb = el('input', { type: 'checkbox', checked: sel.has(d.messageId),
        dataset: { focusKey: d.messageId }, 'aria-label': 'Select message ' + d.messageId });
      cb.addEventListener('change', () => {
        if (cb.checked) sel.add(d.messageId);
        else sel.delete(d.messageId);
        onPick(sel);
      });
      return el('tr', { dataset: { messageId: d.messageId } },
        el('td.pick', { 'data-label': 'Select' }, cb),
        el('td', { 'data-label': 'Message' }, mono(shortId(d.messageId), d.messageId)),
        el('td', { 'data-label': 'Saga' }, sagaLink(d.sagaId)),
        el('td', { 'data-label': 'To' }, d.destination || '—'),
        el('td.num', { 'data-label': 'Attempts' }, fmtNumber(d.attemptCount)),
        el('td', { 'data-label': 'Dead at' }, timeEl(d.deadAt)),
        el('td.act', { 'data-label': '' }, el('button.btn.small', { type: 'button', class: 'retry-one',
          onclick: () => onRetry([d.messageId], 'Message ' + shortId(d.messageId)) }, 'Retry')));
    });
    const head = ['', 'Message', 'Saga', 'To', 'Attempts', 'Dead at', ''].map((t, i) =>
      el('th', { scope: 'col', class: i === 4 ? 'num' : null }, i === 0 ? el('span.sr-only', null, 'Select') : t));
    return el('div.table-wrap', null, el('table.grid.cards.compact', null,
      el('thead', null, el('tr', null, head)), el('tbody', null, rows)));
  }

  /* One group: its head with the group actions; its messages when open. */
  function groupCard(g, letters, state) {
    const key = groupKey(g);
    const ids = letters.map((d) => d.messageId);
    const sel = state.picked.get(key) || new Set();
    for (const id of Array.from(sel)) if (!ids.includes(id)) sel.delete(id);
    state.picked.set(key, sel);
    const isOpen = state.open.has(key);
    const what = g.service + ' / ' + g.type;
    const unlisted = (Number(g.count) || 0) - ids.length;
    const onRetry = (list, text) => state.retry(g.service, list, text);
    const selBtn = el('button.btn.small', { type: 'button', class: 'retry-selected', disabled: sel.size === 0,
      onclick: () => onRetry(Array.from(sel), 'The selected messages of ' + what) },
    'Retry selected (' + sel.size + ')');
    const onPick = () => {
      replace(selBtn, 'Retry selected (' + sel.size + ')');
      selBtn.disabled = sel.size === 0;
    };
    const toggle = el('button.btn.ghost.small', { type: 'button', class: 'group-toggle',
      'aria-expanded': isOpen ? 'true' : 'false', dataset: { focusKey: key + ':toggle' },
      onclick: () => state.toggle(key) }, isOpen ? 'Hide messages' : 'Show messages');
    return el('article.group.card', { dataset: { service: g.service, type: g.type, count: g.count } },
      el('div.group-head', null,
        el('div.group-title', null,
          el('span.svc-tag', null, g.service), el('span.type', null, g.type),
          el('span.count-pill', { title: 'dead letters in this group' }, fmtNumber(g.count))),
        el('div.group-actions', null, toggle,
          el('button.btn.small.primary', { type: 'button', class: 'retry-group', disabled: ids.length === 0,
            onclick: () => onRetry(ids, 'Every listed message of ' + what + ' with this error' +
              (unlisted > 0 ? ' (' + unlisted + ' more are not listed: retry again after)' : '')) },
          'Retry group (' + ids.length + ')'))),
      el('pre.err', null, g.lastError || '(no error text)'),
      isOpen ? el('div.group-body', null, letterTable(g, letters, sel, onPick, onRetry),
        el('div.group-foot', null, selBtn)) : null);
  }

  function groupList(data, f, state) {
    const letters = Array.isArray(data.deadLetters) ? data.deadLetters : [];
    let groups = Array.isArray(data.groups) ? data.groups : [];
    const q = f.q.toLowerCase();
    if (q) groups = groups.filter((g) => String(g.lastError || '').toLowerCase().includes(q));
    if (!groups.length) {
      return el('div.empty', null, el('p', null, f.q || f.service || f.type
        ? 'No dead letters match these filters.'
        : 'No dead letters. Every message was delivered or is still being retried.'));
    }
    const total = groups.reduce((a, g) => a + (Number(g.count) || 0), 0);
    return [el('p.muted.summary-line', null, fmtNumber(total) +
      (total === 1 ? ' dead letter in ' : ' dead letters in ') + groups.length +
      (groups.length === 1 ? ' group' : ' groups') + ', grouped by service, type and error.'),
    groups.map((g) => groupCard(g, letters.filter(inGroup(g)), state))];
  }

  function deadLetterView(parts, params) {
    document.title = 'Dead letters · pgsaga console';
    const f = { service: params.get('service') || '', type: params.get('type') || '',
      q: params.get('q') || '' };
    const status = el('div.status-area');
    const list = el('div.groups', { id: 'dl-groups' });
    let data = { deadLetters: [], groups: [] };
    const state = {
      open: new Set(),   // group keys shown expanded
      picked: new Map(), // group key -> Set of selected message ids
      toggle: (key) => {
        if (state.open.has(key)) state.open.delete(key);
        else state.open.add(key);
        draw();
      },
      retry: async (service, ids, what) => {
        if (await retry(service, ids, what)) await refresh();
      },
    };

    function draw() {
      // A redraw (a toggle, a retry, an auto-refresh) keeps the keyboard
      // focus on the same control.
      const focused = document.activeElement && document.activeElement.dataset
        ? document.activeElement.dataset.focusKey : null;
      replace(list, groupList(data, f, state));
      const again = focused && Array.from(list.querySelectorAll('[data-focus-key]'))
        .find((e) => e.dataset.focusKey === focused);
      if (again) again.focus();
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
      el('summary', null, 'Filters'), dlFilterForm(f));
    const node = el('section.page', { id: 'page-dead-letters' },
      pageHead('Dead letters', 'Messages that were refused or ran out of attempts. Fix the cause, then retry.'),
      box, status, list);
    return { node, refresh };
  }

  // --- deliveries -----------------------------------------------------------------

  function breaker(b) {
    const cls = b === 'open' ? 'bad' : b === 'half_open' ? 'warn' : b === 'closed' ? 'good' : 'unknown';
    return el('span.pill', { class: cls }, b ? String(b).replace('_', '-') : '—');
  }

  function deliveryRow(r) {
    return el('tr', { dataset: { service: r.service, destination: r.destination } },
      el('td', { 'data-label': 'Service' }, el('span.svc-tag', null, r.service)),
      el('td', { 'data-label': 'Destination' }, r.destination),
      el('td.num', { 'data-label': 'Pending', class: r.pending > 0 ? 'hot' : null }, fmtNumber(r.pending)),
      el('td.num', { 'data-label': 'Leased' }, fmtNumber(r.leased)),
      el('td.num', { 'data-label': 'Dead', class: r.dead > 0 ? 'bad-text' : null },
        r.dead > 0 ? el('a', { href: '#/dead-letters' + query({ service: r.service }) }, fmtNumber(r.dead))
          : fmtNumber(r.dead)),
      el('td.num', { 'data-label': 'Oldest pending' },
        !r.pending || r.oldestPendingSeconds === null || r.oldestPendingSeconds === undefined
          ? '—' : fmtDuration(r.oldestPendingSeconds * 1000)),
      el('td', { 'data-label': 'Breaker' }, breaker(r.breaker)));
  }

  function deliveryTable(data) {
    const rows = Array.isArray(data.deliveries) ? data.deliveries : [];
    if (!rows.length) return el('div.empty', null, el('p', null, 'No delivery data.'));
    const head = ['Service', 'Destination', 'Pending', 'Leased', 'Dead', 'Oldest pending', 'Breaker']
      .map((t, i) => el('th', { scope: 'col', class: i >= 2 && i <= 5 ? 'num' : null }, t));
    return el('div.table-wrap', null, el('table.grid.cards', { id: 'delivery-table' },
      el('caption.sr-only', null, 'Outbox delivery per service and destination'),
      el('thead', null, el('tr', null, head)), el('tbody', null, rows.map(deliveryRow))));
  }

  function deliveryView() {
    document.title = 'Deliveries · pgsaga console';
    const status = el('div.status-area');
    const results = el('div.results');

    async function refresh() {
      try {
        const data = await api('GET', '/admin/api/deliveries');
        replace(status, partialBox(data));
        replace(results, deliveryTable(data));
      } catch (e) {
        replace(status, errorBox(e));
      }
    }
    const node = el('section.page', { id: 'page-deliveries' },
      pageHead('Deliveries', 'Each service\'s outbox, per destination: what waits, what is in flight, ' +
        'what died, and the circuit breaker.'),
      status, results);
    return { node, refresh };
  }

  P.views['dead-letters'] = deadLetterView;
  P.views.deliveries = deliveryView;
}(window.pgsaga));
