// The page of `starter console`: it lists the open questions with their
// cards and sends the operator's answers to the console, which signs them.
// Every value is put into the page as text (textContent), never as HTML.
'use strict';

(function () {
  // The session secret lives in this origin's localStorage (scoped by
  // port, unlike a cookie) and goes in a header; never in a cookie.
  const SESSION = 'agentsaga-console-session';
  const PENDING = 'agentsaga-console-pending';
  const loginEl = document.getElementById('login');
  const findErr = document.getElementById('find-error');
  const pageInfo = document.getElementById('pageinfo');
  const prevBtn = document.getElementById('prev');
  const nextBtn = document.getElementById('next');
  let page = 1;
  let pages = 1;
  let deep = null; // {workflow, question} of a /q/ link
  const openEl = document.getElementById('open');
  const decidedEl = document.getElementById('decided');
  const statusEl = document.getElementById('status');
  const noneEl = document.getElementById('none');
  const countEl = document.getElementById('open-count');
  const filters = document.getElementById('filters');
  const decidedFilters = document.getElementById('decided-filters');
  const decidedFrom = document.getElementById('decided-from');
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

  // cardSays is what the card says answer does (its "if <answer>" line),
  // or null: the workflow words it for the tool and the question.
  function cardSays(q, answer) {
    for (const line of q.lines || []) {
      if (line.label === 'if ' + answer) return line.value;
    }
    return null;
  }

  function card(q) {
    const dl = el('dl', 'card');
    for (const line of q.lines || []) {
      // What an answer does is said beside its button, when there is one.
      if (q.may_decide && line.label.startsWith('if ') && (q.answers || []).includes(line.label.slice(3))) continue;
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
    if (!q.may_decide) return out;
    const add = (action, label, cls, fallback) => {
      const does = cardSays(q, action === 'override' ? 'approve' : action) || fallback;
      const b = el('button', cls, label);
      b.type = 'button';
      b.dataset.action = action;
      b.title = does;
      b.dataset.does = does;
      out.push(b);
    };
    // One order for every kind: the answer that makes no new effect first,
    // then the one that confirms, then the one that may make a second
    // effect; none is styled as the default (no "ok" button, no focus).
    // What each does is the card's own line for it, else the words here.
    if (q.kind === 'approval') {
      add('reject', 'Reject', 'no', 'the step is not run; the plan compensates what it did');
      if (q.clash) add('override', 'Override the clash and approve', 'warn', 'runs the step although the card shows a clash or a suspected duplicate');
      else add('approve', 'Approve', 'warn', 'runs the step once, with the arguments on this card');
    } else {
      const what = q.kind === 'reversal' ? 'the reversal' : 'the call';
      const has = (a) => (q.answers || []).includes(a);
      if (has('failed')) add('failed', 'It did not happen (failed)', 'no', 'records that ' + what + ' made no effect; nothing is called');
      if (has('succeeded')) add('succeeded', 'It happened (succeeded)', 'warn', 'records that ' + what + ' took effect; nothing is called');
      if (has('retry')) add('retry', 'Call again (retry)', 'warn', 'calls ' + what + ' again: a second effect (a second e-mail, a second refund) if the first one did happen');
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
    art.append(when, claimRow(q), card(q), el('p', 'digest', 'card ' + q.card_digest), planLine(q));

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
    if (q.unconfirmed) row.append(el('span', 'cannot', q.unconfirmed));
    else if (!q.may_decide) row.append(el('span', 'cannot', 'you may not decide this: it needs the ' + q.needs + ' right'));
    const does = el('ul', 'does');
    for (const b of buttons) does.append(el('li', null, b.textContent + ': ' + b.dataset.does));
    row.append(...buttons);
    const result = el('p', 'result');
    result.setAttribute('role', 'alert');
    form.append(row, does, result);
    art.append(form);

    for (const b of buttons) {
      b.addEventListener('click', () => decide(q, b.dataset.action, reason, ext, buttons, result));
    }
    return art;
  }

  // hhmm words an instant as HH:MM UTC, as the audit trail's note does.
  function hhmm(iso) { return new Date(iso).toISOString().slice(11, 16) + ' UTC'; }

  // claimRow is who works the question, with Claim and Release: the claim
  // is kept in the ledger, so every operator's console shows it.
  function claimRow(q) {
    const p = el('p', 'claim');
    const text = el('span', 'claimed');
    const take = el('button', 'take', 'Claim');
    take.type = 'button';
    take.title = 'tell the other operators you work this question (it lapses unless claimed again)';
    const give = el('button', 'give', 'Release');
    give.type = 'button';
    give.title = 'give the question back';
    const said = el('span', 'claim-result');
    said.setAttribute('role', 'status');
    // Only a question this operator may decide offers Claim and Release:
    // buttons appear only for rights the key holds.
    if (q.may_decide) p.append(text, ' ', take, ' ', give, ' ', said);
    else p.append(text);
    take.addEventListener('click', () => claim(q, 'claim', p));
    give.addEventListener('click', () => claim(q, 'release', p));
    showClaim(p, q.claim);
    return p;
  }

  function showClaim(p, c) {
    const text = p.querySelector('.claimed');
    const take = p.querySelector('.take');
    const give = p.querySelector('.give');
    const art = p.closest('article');
    if (!c) {
      text.textContent = 'not claimed';
      if (take) {
        take.textContent = 'Claim';
        take.hidden = false;
        give.hidden = true;
      }
      p.dataset.by = '';
    } else {
      text.textContent = 'claimed by ' + (c.mine ? 'you (' + c.by + ')' : c.by) + ' since ' + hhmm(c.since) + ' (expires ' + hhmm(c.until) + ')' +
        (c.mine ? '' : ': deciding anyway overrides the claim, and the audit trail records it');
      if (take) {
        take.textContent = 'Keep it (claim again)';
        take.hidden = !c.mine;
        give.hidden = !c.mine;
      }
      p.dataset.by = c.by;
    }
    if (art) art.dataset.claimedBy = p.dataset.by;
  }

  async function claim(q, what, p) {
    const said = p.querySelector('.claim-result');
    said.className = 'claim-result';
    said.textContent = 'sending…';
    try {
      const resp = await fetch('/api/' + what, {
        method: 'POST', credentials: 'same-origin', cache: 'no-store',
        headers: { 'Content-Type': 'application/json', 'X-Agentsaga-Session': session() },
        body: JSON.stringify({ workflow_id: q.workflow_id, question_id: q.question_id }),
      });
      const got = await resp.json();
      if (resp.ok || got.claim) showClaim(p, resp.ok && what === 'release' ? null : got.claim);
      if (!resp.ok) throw new Error(got.error || ('HTTP ' + resp.status));
      said.className = 'claim-result ok';
      said.textContent = got.message;
    } catch (e) {
      said.className = 'claim-result error';
      said.textContent = String(e.message || e);
    }
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
        headers: { 'Content-Type': 'application/json', 'X-Agentsaga-Session': session() },
        body: JSON.stringify(body),
      });
      const got = await resp.json();
      if (!resp.ok) throw new Error(got.error || ('HTTP ' + resp.status));
      result.className = 'result ok';
      result.textContent = got.message;
      // It stays where it is, marked done, until the operator moves on:
      // the list does not move under the pointer.
      const art = result.closest('article');
      art.classList.add('done');
      art.dataset.done = 'true';
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

  function query() {
    const p = new URLSearchParams();
    for (const name of ['view', 'q', 'plan', 'key', 'object', 'requester', 'amount_min', 'amount_max', 'kind', 'tool', 'system', 'sort', 'size']) {
      const v = filters[name].value.trim();
      if (v !== '') p.set(name, v);
    }
    for (const name of ['decided_by', 'outcome', 'within']) {
      const v = decidedFilters[name].value.trim();
      if (v !== '') p.set(name, v);
    }
    if (deep) { p.set('plan', deep.workflow); p.set('view', 'all'); }
    p.set('page', String(page));
    return p.toString();
  }

  function render(data) {
    const want = new Set();
    let prev = null;
    const list = deep ? data.open.filter((q) => q.question_id === deep.question) : data.open;
    for (const q of list) {
      const k = keyOf(q);
      want.add(k);
      let art = shown.get(k);
      if (!art) {
        art = openArticle(q);
        shown.set(k, art);
      }
      if (prev ? prev.nextSibling !== art : openEl.firstChild !== art) {
        if (prev) prev.after(art); else openEl.prepend(art);
      }
      prev = art;
      art.querySelector('.age').textContent = 'open ' + q.age;
      art.querySelector('.expiry').textContent = q.expires ? ' · ' + q.expires : '';
      // Claims live in the ledger: a console without one has none.
      const cl = art.querySelector('.claim');
      cl.hidden = data.decided_from !== 'ledger';
      if (art.dataset.done !== 'true') showClaim(cl, q.claim);
    }
    for (const [k, art] of shown) {
      // A question decided here stays in place, marked done.
      if (!want.has(k) && art.dataset.done !== 'true') { art.remove(); shown.delete(k); }
    }
    decidedEl.replaceChildren(...data.decided.map(decidedArticle));
    decidedFrom.textContent = data.decided_from === 'ledger' ? '(from the ledger\u2019s audit trail)' : '(since this console started; give it --ledger for the audit trail)';
    decidedFilters.hidden = data.decided_from !== 'ledger';
    fillSelect(filters.kind, data.facets.kind);
    fillSelect(filters.tool, data.facets.tool);
    fillSelect(filters.system, data.facets.system);
    page = data.page;
    pages = data.pages;
    pageInfo.textContent = 'page ' + data.page + ' of ' + data.pages;
    prevBtn.disabled = page <= 1;
    nextBtn.disabled = page >= pages;
    countEl.textContent = '(' + data.total + ' match' + (data.total === 1 ? '' : 'es') + ' of ' + data.all + ' open)';
    noneEl.hidden = list.length !== 0;
    if (deep && list.length === 0) {
      noneEl.hidden = false;
      noneEl.textContent = 'Question ' + deep.question + ' of ' + deep.workflow + ' is not open (any more): see Decided below.';
    }
    statusEl.className = data.error ? 'status error' : 'status';
    statusEl.textContent = data.error ? data.error : 'up to date at ' + data.now + ' (refreshed every 3 s; questions listed at ' + (data.listed_at || data.now) + ')';
    document.body.dataset.loaded = 'true';
  }

  function session() { return localStorage.getItem(SESSION) || ''; }

  // login spends the one-time token of the printed link (in the URL's
  // fragment, which no server ever receives) for the session secret.
  async function login() {
    const m = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
    if (!m) return;
    history.replaceState(null, '', location.pathname);
    const resp = await fetch('/api/session', {
      method: 'POST', credentials: 'omit', cache: 'no-store',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: m[1] }),
    });
    const got = await resp.json();
    if (!resp.ok) throw new Error(got.error || ('HTTP ' + resp.status));
    localStorage.setItem(SESSION, got.session);
    const pending = localStorage.getItem(PENDING);
    localStorage.removeItem(PENDING);
    if (pending && /^\/q\//.test(pending) && location.pathname === '/') history.replaceState(null, '', pending);
  }

  async function refresh() {
    if (refreshing) clearTimeout(refreshing);
    try {
      const resp = await fetch('/api/questions?' + query(), {
        credentials: 'omit', cache: 'no-store', headers: { 'X-Agentsaga-Session': session() },
      });
      const data = await resp.json();
      if (resp.status === 403 && !location.hash) {
        // No session (or the console was restarted): keep a question
        // link for after the operator opens the new link.
        if (deep) localStorage.setItem(PENDING, location.pathname);
        loginEl.hidden = false;
        document.body.dataset.loaded = 'true';
        throw new Error(data.error || 'no session');
      }
      if (resp.status === 400) {
        findErr.hidden = false;
        findErr.textContent = data.error;
        return;
      }
      findErr.hidden = true;
      if (!resp.ok) throw new Error(data.error || ('HTTP ' + resp.status));
      loginEl.hidden = true;
      render(data);
    } catch (e) {
      statusEl.className = 'status error';
      statusEl.textContent = 'could not read the questions: ' + String(e.message || e);
    } finally {
      refreshing = setTimeout(refresh, 3000);
    }
  }

  // A new search starts at page 1; moving on (a search, another page)
  // drops the questions decided here.
  function restart() { page = 1; moveOn(); }
  let typing = null;
  // A select searches at once; typing searches once it pauses.
  filters.addEventListener('change', (e) => { if (e.target.tagName === 'SELECT') restart(); });
  filters.addEventListener('input', (e) => {
    if (e.target.tagName !== 'INPUT') return;
    clearTimeout(typing);
    typing = setTimeout(restart, 300);
  });
  filters.addEventListener('submit', (e) => { e.preventDefault(); restart(); });
  decidedFilters.addEventListener('change', (e) => { if (e.target.tagName === 'SELECT') refresh(); });
  decidedFilters.addEventListener('input', (e) => {
    if (e.target.tagName !== 'INPUT') return;
    clearTimeout(typing);
    typing = setTimeout(refresh, 300);
  });
  decidedFilters.addEventListener('submit', (e) => { e.preventDefault(); refresh(); });
  prevBtn.addEventListener('click', () => { if (page > 1) { page--; moveOn(); } });
  nextBtn.addEventListener('click', () => { if (page < pages) { page++; moveOn(); } });
  function moveOn() {
    for (const [k, art] of shown) {
      if (art.dataset.done === 'true') { art.remove(); shown.delete(k); }
    }
    refresh();
  }

  login().catch((e) => {
    statusEl.className = 'status error';
    statusEl.textContent = 'could not open the session: ' + String(e.message || e);
  }).finally(() => {
    const m = /^\/q\/([^/]+)\/([^/]+)$/.exec(location.pathname);
    if (m) deep = { workflow: decodeURIComponent(m[1]), question: decodeURIComponent(m[2]) };
    refresh();
  });
}());
