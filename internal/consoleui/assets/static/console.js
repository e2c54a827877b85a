// The page of `starter console`: it lists the open questions with their
// cards and sends the operator's answers to the console, which signs them.
// Every value is put into the page as text (textContent), never as HTML.
'use strict';

(function () {
  const csrf = document.querySelector('meta[name="agentsaga-csrf"]').content;
  const openEl = document.getElementById('open');
  const decidedEl = document.getElementById('decided');
  const statusEl = document.getElementById('status');
  const noneEl = document.getElementById('none');
  const countEl = document.getElementById('open-count');
  const filters = document.getElementById('filters');
  const shown = new Map(); // question key -> its article
  let refreshing = null;

  // Limits the console enforces (and names when a value is over them).
  const MAX_REASON = 2000;
  const MAX_EXTERNAL_ID = 256;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function keyOf(q) { return q.workflow_id + '\u0000' + q.question_id; }

  function title(q) {
    const h = el('h3');
    h.append(el('span', 'kind', q.kind), ' of step ' + q.step + ' ', el('span', 'tool', q.tool));
    if (q.amount) h.append(' ', el('span', 'amount', q.amount));
    return h;
  }

  function card(q) {
    const dl = el('dl', 'card');
    for (const line of q.lines || []) {
      dl.append(el('dt', null, line.label), el('dd', line.label === 'clash' ? 'clash' : null, line.value));
    }
    return dl;
  }

  function planLine(q) {
    const p = el('p', 'plan');
    p.append('plan ', el('code', null, q.workflow_id), ' · question ', el('code', null, q.question_id), ' · ');
    const a = el('a', null, 'open in the Temporal UI');
    a.href = q.ui;
    a.rel = 'noreferrer noopener';
    a.target = '_blank';
    p.append(a);
    return p;
  }

  function buttonsFor(q) {
    const out = [];
    const add = (action, label, cls) => {
      const b = el('button', cls, label);
      b.type = 'button';
      b.dataset.action = action;
      out.push(b);
    };
    if (q.kind === 'approval') {
      if (q.clash) add('override', 'Override the clash and approve', 'warn');
      else add('approve', 'Approve', 'ok');
      add('reject', 'Reject', 'no');
    } else {
      for (const a of q.answers || []) {
        if (a === 'succeeded') add('succeeded', 'It happened (succeeded)', 'ok');
        if (a === 'failed') add('failed', 'It did not happen (failed)', 'no');
        if (a === 'retry') add('retry', 'It did not happen: call again (retry)', 'warn');
      }
    }
    return out;
  }

  function openArticle(q) {
    const art = el('article', 'question');
    art.dataset.workflow = q.workflow_id;
    art.dataset.question = q.question_id;
    art.dataset.kind = q.kind;
    art.dataset.tool = q.tool;
    art.dataset.system = q.system || '';
    art.append(title(q));
    const when = el('p', 'when');
    when.append(el('span', 'age'), el('span', 'expiry'));
    art.append(when, card(q), el('p', 'digest', 'card ' + q.card_digest), planLine(q));

    const form = el('div', 'decide');
    const rid = 'reason-' + q.question_id + '-' + shown.size;
    const rl = el('label', null, 'reason (required, at most 2,000 bytes)');
    rl.htmlFor = rid;
    const reason = el('textarea');
    reason.id = rid;
    reason.name = 'reason';
    reason.maxLength = MAX_REASON;
    reason.rows = 2;
    form.append(rl, reason);
    let ext = null;
    if (q.kind !== 'approval' && (q.answers || []).includes('succeeded')) {
      const eid = 'ext-' + q.question_id + '-' + shown.size;
      const el2 = el('label', null, 'external id, for succeeded (the provider\u2019s id, at most 256 bytes)');
      el2.htmlFor = eid;
      ext = el('input');
      ext.id = eid;
      ext.name = 'external_id';
      ext.maxLength = MAX_EXTERNAL_ID;
      form.append(el2, ext);
    }
    const row = el('p', 'buttons');
    const buttons = buttonsFor(q);
    row.append(...buttons);
    const result = el('p', 'result');
    result.setAttribute('role', 'alert');
    form.append(row, result);
    art.append(form);

    for (const b of buttons) {
      b.addEventListener('click', () => decide(q, b.dataset.action, reason, ext, buttons, result));
    }
    return art;
  }

  async function decide(q, action, reason, ext, buttons, result) {
    result.className = 'result';
    result.textContent = 'sending…';
    buttons.forEach((b) => { b.disabled = true; });
    const body = {
      workflow_id: q.workflow_id, question_id: q.question_id, action: action,
      reason: reason.value, card_digest: q.card_digest,
    };
    if (ext && ext.value !== '') body.external_id = ext.value;
    try {
      const resp = await fetch('/api/decide', {
        method: 'POST', credentials: 'same-origin', cache: 'no-store',
        headers: { 'Content-Type': 'application/json', 'X-Agentsaga-CSRF': csrf },
        body: JSON.stringify(body),
      });
      const got = await resp.json();
      if (!resp.ok) throw new Error(got.error || ('HTTP ' + resp.status));
      result.className = 'result ok';
      result.textContent = got.message;
    } catch (e) {
      result.className = 'result error';
      result.textContent = String(e.message || e);
      buttons.forEach((b) => { b.disabled = false; });
      return;
    }
    refresh();
  }

  function decidedArticle(q) {
    const art = el('article', 'question decided');
    art.dataset.workflow = q.workflow_id;
    art.dataset.question = q.question_id;
    art.append(title(q));
    const d = q.decision;
    const who = d.by + (d.verified ? ' (verified)' : ' (unverified)');
    const v = el('p', 'verdict');
    v.append(el('strong', null, d.verdict), ' by ', el('span', 'by', who), ' at ' + d.at);
    art.append(v);
    if (d.note) art.append(el('p', 'note', 'reason: ' + d.note));
    art.append(el('p', 'when', 'they saw this card:'), card(q));
    art.append(el('p', 'digest', d.card_seen), planLine(q));
    return art;
  }

  function fillSelect(sel, values) {
    const cur = sel.value;
    const want = [''].concat(Array.from(new Set(values)).filter((v) => v).sort());
    const have = Array.from(sel.options).map((o) => o.value);
    if (want.join('\u0000') === have.join('\u0000')) return;
    sel.replaceChildren();
    for (const v of want) {
      const o = el('option', null, v === '' ? 'all' : v);
      o.value = v;
      sel.append(o);
    }
    sel.value = want.includes(cur) ? cur : '';
  }

  function applyFilters() {
    const f = { kind: filters.kind.value, tool: filters.tool.value, system: filters.system.value };
    let visible = 0;
    for (const art of shown.values()) {
      const hide = (f.kind && art.dataset.kind !== f.kind) || (f.tool && art.dataset.tool !== f.tool) ||
        (f.system && art.dataset.system !== f.system);
      art.hidden = !!hide;
      if (!hide) visible++;
    }
    countEl.textContent = '(' + visible + (visible === shown.size ? '' : ' of ' + shown.size) + ')';
    noneEl.hidden = shown.size !== 0;
  }

  function render(data) {
    const want = new Set();
    let prev = null;
    for (const q of data.open) {
      const k = keyOf(q);
      want.add(k);
      let art = shown.get(k);
      if (!art) {
        art = openArticle(q);
        shown.set(k, art);
      }
      // Oldest first: keep the server's order without rebuilding what the
      // operator may be typing into.
      if (prev ? prev.nextSibling !== art : openEl.firstChild !== art) {
        if (prev) prev.after(art); else openEl.prepend(art);
      }
      prev = art;
      art.querySelector('.age').textContent = 'open ' + q.age;
      art.querySelector('.expiry').textContent = q.expires ? ' · ' + q.expires : '';
    }
    for (const [k, art] of shown) {
      if (!want.has(k)) { art.remove(); shown.delete(k); }
    }
    decidedEl.replaceChildren(...data.decided.map(decidedArticle));
    fillSelect(filters.kind, data.open.map((q) => q.kind));
    fillSelect(filters.tool, data.open.map((q) => q.tool));
    fillSelect(filters.system, data.open.map((q) => q.system));
    applyFilters();
    statusEl.className = data.error ? 'status error' : 'status';
    statusEl.textContent = data.error ? data.error : 'up to date at ' + data.now + ' (refreshed every 3 s)';
    document.body.dataset.loaded = 'true';
  }

  async function refresh() {
    if (refreshing) clearTimeout(refreshing);
    try {
      const resp = await fetch('/api/questions', { credentials: 'same-origin', cache: 'no-store' });
      const data = await resp.json();
      if (!resp.ok) throw new Error(data.error || ('HTTP ' + resp.status));
      render(data);
    } catch (e) {
      statusEl.className = 'status error';
      statusEl.textContent = 'could not read the questions: ' + String(e.message || e);
    } finally {
      refreshing = setTimeout(refresh, 3000);
    }
  }

  filters.addEventListener('change', applyFilters);
  refresh();
}());
