/*
 * Saga definitions in the console: the Definitions page (#/definitions),
 * each definition with its versions, each version drawn as its line of
 * steps; and what the saga pages need of a definition (P.definition,
 * P.definitionNames, P.stepLine). See console.js for the frame and the
 * rule that data goes into the page as text only.
 */
'use strict';

(function (P) {
  const { el, replace, api, query, errorBox, pageHead, fmtDuration } = P;

  // A (name, version) never changes once registered: each is read once
  // per page load. A failed read is not kept.
  const cache = new Map();

  function definition(name, version) {
    const key = name + '/' + version;
    if (!cache.has(key)) {
      const p = api('GET', '/admin/api/definitions/' + encodeURIComponent(name) + '/' +
        encodeURIComponent(version));
      p.catch(() => cache.delete(key));
      cache.set(key, p);
    }
    return cache.get(key);
  }

  /* The registered definitions: [{name, versions, latest}]. */
  async function definitionNames() {
    const data = await api('GET', '/admin/api/definitions');
    return Array.isArray(data.definitions) ? data.definitions : [];
  }

  /*
   * A definition's steps in order, as a line of boxes: each with its name,
   * participant, the command and the events that answer it, the
   * compensation and the event that answers it. status (optional): step
   * name -> {state, label}, what one saga's step did, drawn on its box.
   */
  function stepLine(def, status) {
    const steps = Array.isArray(def.steps) ? def.steps : [];
    return el('ol.steps-line', { 'aria-label': 'Steps of ' + def.name + ' version ' + def.version },
      steps.map((st, i) => {
        const s = status ? status[st.name] : null;
        const fields = Array.isArray(st.fields) && st.fields.length ? st.fields : null;
        return el('li.def-step', { class: s ? 'is-' + s.state : null,
          dataset: { step: st.name, status: s ? s.state : '' } },
        el('div.def-step-head', null,
          el('span.def-step-n', { 'aria-hidden': 'true' }, String(i + 1)),
          el('strong.def-step-name', null, st.name),
          el('span.svc-tag.def-participant', null, st.participant),
          s ? el('span.def-status', null, s.label) : null),
        el('div.def-cmd', null, el('span.lbl', null, 'do'),
          el('span.mono.def-command', null, st.command),
          el('span.def-ev', null, '→ ' + st.succeeded + ' or ' + st.failed)),
        el('div.def-cmd.undo', null, el('span.lbl', null, 'undo'),
          el('span.mono.def-compensation', null, st.compensation),
          el('span.def-ev', null, '→ ' + st.compensated)),
        fields || st.deadlineMs ? el('div.def-meta', null,
          fields ? 'carries ' + fields.join(', ') : null,
          fields && st.deadlineMs ? ' · ' : null,
          st.deadlineMs ? 'deadline ' + fmtDuration(st.deadlineMs) : null) : null);
      }));
  }

  function inputList(input) {
    const names = Object.keys(input || {});
    if (!names.length) return el('span.muted', null, 'none');
    return names.map((k) => {
      const t = input[k] || {};
      const range = t.type === 'integer' ? ' ' + t.min + '…' + t.max
        : t.type === 'string' ? ' ≤ ' + t.maxLength : '';
      return el('span.def-field', null, el('span.mono', null, k), ' ',
        el('span.muted', null, String(t.type) + range));
    });
  }

  function versionBody(def) {
    return [el('div.def-input', null, el('span.field', null, 'Input'), inputList(def.input)),
      stepLine(def)];
  }

  function definitionsView() {
    document.title = 'Definitions · pgsaga console';
    const status = el('div.status-area');
    const list = el('div.defs', { id: 'definitions' });
    const opened = new Set(); // older versions unfolded, kept across refreshes

    function older(def) {
      const key = def.name + '/' + def.version;
      const d = el('details.def-version', { open: opened.has(key) || null,
        dataset: { version: def.version } },
      el('summary', null, 'version ' + def.version), versionBody(def));
      d.addEventListener('toggle', () => (d.open ? opened.add(key) : opened.delete(key)));
      return d;
    }

    async function card(d) {
      const versions = (Array.isArray(d.versions) ? d.versions : []).slice().sort((a, b) => b - a);
      const docs = await Promise.all(versions.map((v) => definition(d.name, v)));
      return el('section.card.def-card', { id: 'def-' + d.name, dataset: { name: d.name } },
        el('div.def-card-head', null,
          el('h2', null, d.name),
          el('span.muted', null, versions.length === 1 ? '1 version'
            : versions.length + ' versions: ' + versions.join(', ')),
          el('a.btn.small', { href: '#/sagas' + query({ definition: d.name }) }, 'Its sagas')),
        docs.length ? el('div.def-version.latest', { dataset: { version: docs[0].version } },
          el('h3', null, 'version ' + docs[0].version, ' ', el('span.pill.good', null, 'latest')),
          versionBody(docs[0])) : null,
        docs.slice(1).map(older));
    }

    async function refresh() {
      try {
        const cards = await Promise.all((await definitionNames()).map(card));
        replace(status);
        replace(list, cards.length ? cards
          : el('div.empty', null, el('p', null, 'No definition is registered.')));
      } catch (e) {
        replace(status, errorBox(e));
      }
    }

    const node = el('section.page', { id: 'page-definitions' },
      pageHead('Definitions', 'Each saga definition, its versions, and its steps in order'),
      status, list);
    return { node, refresh };
  }

  P.views.definitions = definitionsView;
  Object.assign(P, { definition, definitionNames, stepLine });
}(window.pgsaga));
