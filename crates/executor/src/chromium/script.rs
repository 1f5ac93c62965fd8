//! The JavaScript the executor evaluates in a page: finding targets, the checks made before
//! anything is dispatched, reading a value, watching for an expectation, and the page's
//! outline (`page.snapshot`).
//!
//! Each is a function of one JSON argument, evaluated as `(FUNCTION)(ARGUMENT)` in the
//! executor's isolated world of the page's document (see `Page::eval`): the page's scripts
//! cannot see its globals (the refs of the latest snapshot) or replace the built-ins it calls.
//! None of them changes what the page shows or sends: focusing a field and scrolling an element
//! into view are the only effects, and input itself is dispatched as real browser events by the
//! executor, never synthesised here (except for the value of a `<select>`, a date or a number
//! field, which no key sequence sets reliably).
//!
//! Every script that takes a target takes it as `sel` (a CSS string, `{"ref"}`, `{"role",
//! "name"?, "exact"?, "frame"?}`, `{"text", "exact"?, "frame"?}`, or `{"page": "url"|"text"}`
//! for reads) and `label` (the target as Polaris writes it, for messages), and resolves it with
//! the one `locate` of the prelude.

/// Helpers shared by every script.
///
/// - `locate(sel)` → `{el}` | `{absent}` (a CSS selector matches nothing) | `{fail}` |
///   `{notSent, why, candidates?}` (`stale_ref`, `no_match`, `ambiguous`).
/// - `unusable(el)` → why the element cannot take input (or null); `valueOf(el)`; `read(sel)`.
/// - `roleOf(el)`, `nameOf(el, role)`: the ARIA role and accessible name, as the outline and
///   role locators see them.
/// - `kids(node)`: the children in the composed tree — an open shadow root's content instead of
///   its host's light children (slots show what is assigned to them), a reachable frame's body.
macro_rules! prelude {
    () => {
        r#"
const W = globalThis;
const MAX_WALK = 20000;
const SKIP_TAGS = new Set(['script', 'style', 'template', 'noscript', 'head', 'meta', 'link', 'title']);
const norm = (s) => String(s == null ? '' : s).replace(/\s+/g, ' ').trim();
const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);
const isEl = (n) => n && n.nodeType === 1;
const tag = (el) => el.localName;
const frameDoc = (el) => { try { const d = el.contentDocument; return d && (d.body || d.documentElement) ? d : null; } catch (e) { return null; } };
const kids = (n) => {
  if (isEl(n)) {
    if (n.shadowRoot) return [...n.shadowRoot.childNodes];
    if (tag(n) === 'slot') { const a = n.assignedNodes({ flatten: true }); return a.length ? a : [...n.childNodes]; }
    if (tag(n) === 'iframe' || tag(n) === 'frame') { const d = frameDoc(n); return d ? [d.body || d.documentElement] : []; }
  }
  return n.childNodes ? [...n.childNodes] : [];
};
// `kids` without the array, for walks that only go through them once.
const eachKid = (n, fn) => {
  if (isEl(n) && (n.shadowRoot || ownKidsNot(tag(n)))) { for (const k of kids(n)) fn(k); return; }
  for (let k = n.firstChild; k; k = k.nextSibling) fn(k);
};
// Whether an element of this tag shows something other than its own children.
const ownKidsNot = (t) => t === 'slot' || t === 'iframe' || t === 'frame';
const styleOf = (el) => {
  try { const v = el.ownerDocument.defaultView; return (v || W).getComputedStyle(el); } catch (e) { return null; }
};
const hiddenEl = (el, st) => {
  if (SKIP_TAGS.has(tag(el))) return true;
  if (el.getAttribute('aria-hidden') === 'true') return true;
  if (tag(el) === 'input' && el.type === 'hidden') return true;
  if (!st) return false;
  return st.display === 'none' || st.visibility === 'hidden' || st.visibility === 'collapse';
};
// `checkVisibility` answers "shown" without building a computed style; anything it does not
// call shown (no box of its own: `display: contents`, an `<option>`, a hidden one) is judged
// by the computed style as before, so the two agree on every element.
const hiddenQuick = (el, t = tag(el)) => {
  if (SKIP_TAGS.has(t) || el.getAttribute('aria-hidden') === 'true') return true;
  if (t === 'input' && el.type === 'hidden') return true;
  if (typeof el.checkVisibility === 'function' && el.checkVisibility({ visibilityProperty: true })) return false;
  return hiddenEl(el, styleOf(el));
};
const each = (root, fn) => {
  const stack = [root]; let n = 0;
  while (stack.length) {
    const node = stack.pop();
    if (isEl(node)) {
      if (++n > MAX_WALK) return false;
      if (fn(node) === 'skip') continue;
    }
    const k = kids(node);
    for (let i = k.length - 1; i >= 0; i--) { const t = k[i].nodeType; if (t === 1 || t === 9 || t === 11) stack.push(k[i]); }
  }
  return true;
};
const TEXT_OF_ITSELF = new Set(['img', 'area', 'input', 'select', 'textarea', 'iframe', 'frame', 'br']);
const textOf = (node, skip) => {
  let out = '';
  // The common case, an element holding only text: its text, as the walk below reads it.
  if (isEl(node) && node !== skip && !node.firstElementChild && !node.shadowRoot && !TEXT_OF_ITSELF.has(tag(node)) && tag(node) !== 'slot') {
    for (let k = node.firstChild; k; k = k.nextSibling) if (k.nodeType === 3 && out.length <= 4000) out += k.data;
    return norm(out);
  }
  const walk = (n, depth) => {
    if (depth > 200 || out.length > 4000) return;
    if (n.nodeType === 3) { out += n.data; return; }
    if (n.nodeType === 11) { eachKid(n, (k) => walk(k, depth + 1)); return; }
    if (!isEl(n) || n === skip) return;
    // The element asked about was judged by its caller; only its content is looked at here.
    if (depth === 0 && !TEXT_OF_ITSELF.has(tag(n))) { eachKid(n, (k) => walk(k, 1)); return; }
    const st = styleOf(n);
    if (hiddenEl(n, st)) return;
    const t = tag(n);
    if (t === 'img' || t === 'area') { out += ' ' + (n.getAttribute('alt') || '') + ' '; return; }
    if (t === 'input') { if (['button', 'submit', 'reset'].includes(n.type)) out += ' ' + n.value + ' '; return; }
    if (t === 'select' || t === 'textarea' || t === 'iframe' || t === 'frame') return;
    if (t === 'br') { out += ' '; return; }
    const block = !st || !String(st.display).startsWith('inline');
    if (block) out += ' ';
    eachKid(n, (k) => walk(k, depth + 1));
    if (block) out += ' ';
  };
  walk(node, 0);
  return norm(out);
};
const INPUT_ROLES = { button: 'button', submit: 'button', reset: 'button', image: 'button', file: 'button', checkbox: 'checkbox', radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox' };
const NAME_FROM_CONTENT = new Set(['button', 'link', 'heading', 'option', 'tab', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'treeitem', 'checkbox', 'radio', 'switch', 'cell', 'columnheader', 'rowheader', 'tooltip']);
const FIELD_ROLES = new Set(['textbox', 'searchbox', 'combobox', 'listbox', 'slider', 'spinbutton']);
const labelled = (el) => el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') || el.hasAttribute('title');
const roleOf = (el) => {
  const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase();
  if (explicit && explicit !== 'none' && explicit !== 'presentation' && explicit !== 'generic') return explicit;
  if (explicit) return null;
  const t = tag(el);
  switch (t) {
    case 'a': case 'area': return el.hasAttribute('href') ? 'link' : null;
    case 'button': return 'button';
    case 'input': { const ty = el.type || 'text'; if (ty === 'hidden') return null; return INPUT_ROLES[ty] || (el.hasAttribute('list') ? 'combobox' : 'textbox'); }
    case 'select': return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
    case 'option': return 'option';
    case 'textarea': return 'textbox';
    case 'h1': case 'h2': case 'h3': case 'h4': case 'h5': case 'h6': return 'heading';
    case 'img': return el.getAttribute('alt') === '' ? null : 'img';
    case 'ul': case 'ol': case 'menu': return 'list';
    case 'li': return 'listitem';
    case 'nav': return 'navigation';
    case 'main': return 'main';
    case 'aside': return 'complementary';
    case 'header': return el.closest('article,aside,main,nav,section') ? null : 'banner';
    case 'footer': return el.closest('article,aside,main,nav,section') ? null : 'contentinfo';
    case 'form': return labelled(el) ? 'form' : null;
    case 'section': return labelled(el) ? 'region' : null;
    case 'article': return 'article';
    case 'dialog': return 'dialog';
    case 'fieldset': return 'group';
    case 'table': return 'table';
    case 'tr': return 'row';
    case 'td': return 'cell';
    case 'th': return 'columnheader';
    case 'hr': return 'separator';
    case 'progress': return 'progressbar';
    case 'meter': return 'meter';
    case 'output': return 'status';
    case 'p': return 'paragraph';
    case 'summary': return 'button';
    case 'iframe': case 'frame': return 'iframe';
  }
  if (el.isContentEditable && el.hasAttribute('contenteditable')) return 'textbox';
  return null;
};
const byIds = (el, ids) => {
  const root = el.getRootNode();
  return ids.split(/\s+/).filter(Boolean).map((id) => (root.getElementById ? root.getElementById(id) : null)).filter(Boolean);
};
const nameOf = (el, role) => {
  const lb = el.getAttribute('aria-labelledby');
  if (lb) { const t = norm(byIds(el, lb).map((e) => textOf(e)).join(' ')); if (t) return t; }
  const al = norm(el.getAttribute('aria-label'));
  if (al) return al;
  const t = tag(el);
  if (t === 'input' || t === 'select' || t === 'textarea') {
    if (t === 'input' && ['button', 'submit', 'reset'].includes(el.type)) return norm(el.value) || (el.type === 'submit' ? 'Submit' : el.type === 'reset' ? 'Reset' : '');
    if (t === 'input' && el.type === 'image') { const a = norm(el.getAttribute('alt')); if (a) return a; }
    const labels = el.labels ? [...el.labels] : [];
    const fromLabels = norm(labels.map((l) => textOf(l, el)).join(' '));
    if (fromLabels) return fromLabels;
    const ph = norm(el.getAttribute('placeholder'));
    if (ph) return ph;
  } else if (t === 'img' || t === 'area') {
    const a = norm(el.getAttribute('alt')); if (a) return a;
  } else if (t === 'fieldset') {
    const lg = [...el.children].find((c) => tag(c) === 'legend'); if (lg) { const x = textOf(lg); if (x) return x; }
  } else if (t === 'table') {
    const c = el.querySelector('caption'); if (c) { const x = textOf(c); if (x) return x; }
  } else if (NAME_FROM_CONTENT.has(role)) {
    const x = textOf(el); if (x) return x;
  }
  return norm(el.getAttribute('title'));
};
const describe = (el) => {
  const role = roleOf(el);
  const name = role ? nameOf(el, role) : textOf(el);
  let d = `${role || tag(el)}${name ? ' ' + JSON.stringify(clip(name, 60)) : ''}`;
  if (el.id) d += ` (#${el.id})`;
  return d;
};
const tagOf = (el) => `<${el.localName}${el.id ? '#' + el.id : ''}${typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : ''}>`;
const matchName = (have, want, exact) => (exact ? have === want : have.toLowerCase().includes(want.toLowerCase()));
const visibleEl = (el) => { const st = styleOf(el); return !hiddenEl(el, st); };
const byRole = (root, sel) => {
  const found = [];
  each(root, (el) => {
    if (!visibleEl(el)) return 'skip';
    if (roleOf(el) !== sel.role) return;
    if (sel.name == null || matchName(nameOf(el, sel.role), norm(sel.name), !!sel.exact)) found.push(el);
  });
  return found;
};
const byText = (root, sel) => {
  const want = norm(sel.text);
  const exact = !!sel.exact;
  const has = (t) => (exact ? t.includes(want) : t.toLowerCase().includes(want.toLowerCase()));
  const found = [];
  let visited = 0;
  // An element's text leaves out what its frames and shadow roots show: a subtree holding
  // one is searched even when its own text does not match.
  const holdsMore = new Set();
  const doc = root.nodeType === 9 ? root : root.ownerDocument || root;
  for (const e of doc.querySelectorAll('*')) {
    if (!(e.shadowRoot || tag(e) === 'iframe' || tag(e) === 'frame')) continue;
    for (let a = e.parentElement; a && !holdsMore.has(a); a = a.parentElement) holdsMore.add(a);
  }
  const descend = (el) => {
    if (++visited > MAX_WALK || !isEl(el) || !visibleEl(el)) return false;
    if (tag(el) === 'iframe' || tag(el) === 'frame') return kids(el).map((k) => descend(k)).includes(true);
    const t = tag(el) === 'input' ? (['button', 'submit', 'reset'].includes(el.type) ? norm(el.value) : '') : textOf(el);
    if (!has(t) && !holdsMore.has(el) && !el.shadowRoot) return false;
    let hit = false;
    const stack = [...kids(el)];
    while (stack.length) {
      const k = stack.shift();
      if (k.nodeType === 11) { stack.unshift(...kids(k)); continue; }
      if (isEl(k) && descend(k)) hit = true;
    }
    if (hit) return true;
    if (has(t) && (exact ? t === want : true)) { found.push(el); return true; }
    return false;
  };
  const start = root.nodeType === 9 ? (root.body || root.documentElement) : root;
  if (start) descend(start);
  return found;
};
const locate = (sel) => {
  if (typeof sel === 'string') {
    let el;
    try { el = document.querySelector(sel); }
    catch (e) { return { fail: `${sel} is not a valid CSS selector (${e.message})` }; }
    if (!el) return { absent: `no element matches ${sel} on ${location.href}` };
    return { el };
  }
  if (!sel || typeof sel !== 'object') return { fail: 'no target' };
  if (sel.ref != null) {
    const m = W.__polarisRefs;
    const n = parseInt(String(sel.ref).slice(1), 10);
    if (!m || !(n >= m.first && n < m.first + m.els.length)) return { notSent: 'stale_ref', why: `ref ${sel.ref} is not one of the latest page.snapshot of this page (refs last until the page navigates or is snapshotted again); take a new page.snapshot and use its refs` };
    const el = m.els[n - m.first];
    if (!el || !el.isConnected) return { notSent: 'stale_ref', why: `ref ${sel.ref} names an element that has left the page since the snapshot; take a new page.snapshot` };
    return { el };
  }
  const what = sel.role != null ? `role=${sel.role}${sel.name != null ? ' name=' + JSON.stringify(sel.name) : ''}` : `text=${JSON.stringify(sel.text)}`;
  let root = document;
  if (sel.frame != null) {
    const f = locate(sel.frame);
    if (!f.el) {
      const at = (m) => m && `the frame of ${what}: ${m}`;
      return { notSent: f.notSent, candidates: f.candidates, why: at(f.why), absent: at(f.absent), fail: at(f.fail) };
    }
    if (tag(f.el) !== 'iframe' && tag(f.el) !== 'frame') return { fail: `the frame of ${what} is ${describe(f.el)}, not an iframe` };
    const d = frameDoc(f.el);
    if (!d) return { fail: `the frame of ${what} (${describe(f.el)}) has no document the executor can reach (not loaded yet, or out of process)` };
    root = d;
  }
  const found = sel.role != null ? byRole(root, sel) : byText(root, sel);
  if (found.length === 1) return { el: found[0] };
  if (!found.length) return { notSent: 'no_match', why: `${what} matches no element of the page; take a page.snapshot to see what is there` };
  const candidates = found.slice(0, 10).map(describe);
  return { notSent: 'ambiguous', candidates, why: `${what} matches ${found.length} elements: ${candidates.join(', ')}${found.length > 10 ? ', …' : ''}; name one (a ref from page.snapshot, or a longer name with "exact": true)` };
};
const unusable = (el) => {
  if (!el.isConnected) return 'no longer in the document';
  const s = styleOf(el);
  if (s && s.display === 'none') return 'hidden (display: none)';
  if (s && (s.visibility === 'hidden' || s.visibility === 'collapse')) return 'hidden (visibility: hidden)';
  if (el.getClientRects().length === 0) return 'not rendered (it has no layout box)';
  if (el.matches(':disabled')) return 'disabled';
  if (el.getAttribute('aria-disabled') === 'true') return 'disabled (aria-disabled)';
  return null;
};
const isToggle = (el) => tag(el) === 'input' && (el.type === 'checkbox' || el.type === 'radio');
const valueOf = (el) => {
  const t = tag(el);
  if (isToggle(el)) return String(el.checked);
  if (t === 'select') return [...el.selectedOptions].map((o) => o.value).join(',');
  if (t === 'input' || t === 'textarea') return el.value;
  const ac = el.getAttribute('aria-checked');
  if (ac != null && ['checkbox', 'radio', 'switch', 'menuitemcheckbox', 'menuitemradio'].includes(roleOf(el))) return String(ac === 'true');
  const x = typeof el.innerText === 'string' ? el.innerText : (el.textContent || '');
  return x.trim();
};
const read = (sel) => {
  if (sel && typeof sel === 'object' && sel.page === 'url') return { value: location.href };
  if (sel && typeof sel === 'object' && sel.page === 'text') return { value: document.body ? document.body.innerText : '' };
  const r = locate(sel); if (!r.el) return r;
  return { value: valueOf(r.el) };
};
const rootActive = (el) => { const r = el.getRootNode(); return r.activeElement === el || (r.activeElement && el.contains(r.activeElement)); };
const focusOn = (el) => {
  el.scrollIntoView({ block: 'center', inline: 'nearest', behavior: 'instant' });
  el.focus({ preventScroll: true });
  return rootActive(el);
};
const toTop = (el, x, y) => {
  let w = el.ownerDocument.defaultView;
  while (w && w !== W.top && w.frameElement) {
    const fe = w.frameElement;
    const r = fe.getBoundingClientRect();
    const st = styleOf(fe);
    x += r.left + fe.clientLeft + (st ? parseFloat(st.paddingLeft) || 0 : 0);
    y += r.top + fe.clientTop + (st ? parseFloat(st.paddingTop) || 0 : 0);
    w = fe.ownerDocument.defaultView;
  }
  return { x, y };
};
const clickPoint = (el, label) => {
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const boxes = [el.getBoundingClientRect(), ...el.getClientRects()];
  const view = el.ownerDocument.defaultView || W;
  const root = el.getRootNode();
  let covered = null;
  for (const b of boxes) {
    if (b.width < 1 || b.height < 1) continue;
    const x = b.left + b.width / 2, y = b.top + b.height / 2;
    if (x < 0 || y < 0 || x >= view.innerWidth || y >= view.innerHeight) continue;
    const hit = (root.elementFromPoint ? root : el.ownerDocument).elementFromPoint(x, y);
    if (hit && (hit === el || el.contains(hit))) { const p = toTop(el, x, y); if (p.x >= 0 && p.y >= 0 && p.x < W.innerWidth && p.y < W.innerHeight) return p; continue; }
    if (hit) covered = hit;
  }
  if (covered) return { fail: `${label} is covered by ${tagOf(covered)} at its centre` };
  return { fail: `${label} has no visible point inside the viewport` };
};
"#
    };
}

/// The helpers every script begins with, as they appear in each script's text.
pub const PRELUDE: &str = prelude!();

/// `{sel, label, value}` → `{fail}` | `{absent}` | `{notSent}` | `{mode}`: checks a field,
/// focuses it and selects its content so that typed text replaces it. `mode` is `type` (text
/// the executor inserts with `Input.insertText`), `editable` (a contenteditable element,
/// likewise) or `set` (a select, date, number… whose value [`SET_VALUE`] sets).
pub const PREPARE_FILL: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.label} is ${why}` };
  if (el.readOnly) return { fail: `${a.label} is read-only` };
  let mode;
  const t = tag(el);
  if (t === 'textarea') mode = 'type';
  else if (t === 'input') {
    const ty = el.type;
    if (['text', 'search', 'url', 'tel', 'password', 'email'].includes(ty)) mode = 'type';
    else if (['number', 'date', 'time', 'datetime-local', 'month', 'week', 'color', 'range'].includes(ty)) mode = 'set';
    else return { fail: `${a.label} is an <input type=${ty}>, which holds no typed text: it cannot be filled. A checkbox or radio takes page.check (or a page.click whose expect reads its new checked state); a file input takes page.upload` };
  } else if (t === 'select') {
    if (![...el.options].some((o) => o.value === a.value)) return { fail: `${a.label} has no option with the value ${JSON.stringify(a.value)}` };
    mode = 'set';
  } else if (el.isContentEditable) mode = 'editable';
  else return { fail: `${a.label} is ${describe(el)}, not a form field or an editable element` };
  if (!focusOn(el)) return { fail: `${a.label} could not be focused` };
  if (mode === 'type') el.select();
  else if (mode === 'editable') {
    const range = el.ownerDocument.createRange(); range.selectNodeContents(el);
    const s = el.ownerDocument.getSelection(); s.removeAllRanges(); s.addRange(range);
  }
  return { mode };
}"#
);

/// `{sel, label, value}` → `{value}` | `{absent}`: sets the value of a select, date, number…
/// field the way a picker does, and announces it with `input` and `change`.
pub const SET_VALUE: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const proto = tag(el) === 'select' ? HTMLSelectElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, a.value);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: valueOf(el) };
}"#
);

/// `{sel, label}` → `{value}` | `{absent}`: announces a typed value with `change` (as leaving
/// the field would) and reads it back.
pub const FINISH_FILL: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  r.el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: valueOf(r.el) };
}"#
);

/// `{sel, label, expect?}` → `{fail}` | `{absent}` | `{notSent}` | `{x, y}`: checks an element,
/// scrolls it into view and finds the viewport point at its centre that a click would hit
/// (refusing one covered by another element). Elements in frames answer in the top viewport's
/// coordinates. With `expect` (`{sel, label, op, want}`, the click's expectation in the same
/// world) it first reads the expectation, as [`READ`] would, and answers it as `before`; when
/// the value already holds, or the read names no one element, nothing else is done (no scroll).
pub const PREPARE_CLICK: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  let before;
  if (a.expect) {
    before = read(a.expect.sel);
    const v = before.value;
    if (v != null && (a.expect.op === 'equals' ? v === a.expect.want : v.includes(a.expect.want))) return { before };
    if (before.fail || before.notSent === 'stale_ref' || before.notSent === 'ambiguous') return { before };
  }
  const r = locate(a.sel); if (!r.el) return { ...r, before };
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.label} is ${why}`, before };
  return { ...clickPoint(el, a.label), before };
}"#
);

/// `{sel, label}` → `{fail}` | `{absent}` | `{notSent}` | `{ok}`: checks an element and gives it
/// the focus, for a key press (the caret goes to the end of a field, for `page.type`).
pub const PREPARE_KEY: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.label} is ${why}` };
  if (!focusOn(el)) return { fail: `${a.label} could not be focused` };
  if (a.caretAtEnd && typeof el.setSelectionRange === 'function') {
    try { const n = el.value.length; el.setSelectionRange(n, n); } catch (e) { /* not a text field */ }
  }
  return { ok: true };
}"#
);

/// `{sel, label}` → `{value}` | `{absent}` | `{fail}` | `{notSent}`: reads a target (or the
/// page's URL or text) without changing anything.
pub const READ: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  return read(a.sel);
}"#
);

/// `{sel, label, op, want, ms}` → a promise of `{holds, value}` | `{absent}` | `{fail}` |
/// `{notSent}`: resolves as soon as the target's value `equals`/`contains` `want`, or after `ms`
/// with what was last seen. Watches DOM mutations and input events, with a slow poll behind them
/// for values set by script (and for the URL).
pub const WATCH: &str = concat!(
    "(a) => new Promise((resolve) => {",
    prelude!(),
    r#"
  const check = () => {
    const r = read(a.sel); if (r.value == null) return r;
    const value = r.value;
    const holds = a.op === 'equals' ? value === a.want : value.includes(a.want);
    return { holds, value };
  };
  const first = check();
  if (first.holds || first.fail || first.notSent === 'stale_ref' || first.notSent === 'ambiguous') { resolve(first); return; }
  let done = false, obs = null, poll = 0, timer = 0;
  const finish = (r) => {
    if (done) return; done = true;
    if (obs) obs.disconnect();
    clearInterval(poll); clearTimeout(timer);
    document.removeEventListener('input', onChange, true);
    resolve(r);
  };
  const onChange = () => { const r = check(); if (r.holds) finish(r); };
  obs = new MutationObserver(onChange);
  obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
  document.addEventListener('input', onChange, true);
  poll = setInterval(onChange, 25);
  timer = setTimeout(() => finish(check()), Math.max(0, a.ms));
})"#
);

/// `{sel?, label, text?, visible, ms}` → a promise of `{done}` | `{notSent}` | `{fail}`:
/// resolves `done: true` as soon as the target is shown (or the page's text holds `text`) —
/// hidden or gone instead when `visible` is false — else `done: false` after `ms`.
pub const WAIT: &str = concat!(
    "(a) => new Promise((resolve) => {",
    prelude!(),
    r#"
  const shown = () => {
    if (a.sel == null) return { shown: !!(document.body && document.body.innerText.includes(a.text || '')) };
    const r = locate(a.sel);
    if (r.notSent === 'stale_ref' || r.notSent === 'ambiguous' || r.fail) return r;
    if (!r.el) return { shown: false };
    return { shown: r.el.isConnected && visibleEl(r.el) && r.el.getClientRects().length > 0 };
  };
  const check = () => { const s = shown(); return s.shown === undefined ? s : { done: s.shown === !!a.visible }; };
  const first = check();
  if (first.done !== false) { resolve(first); return; }
  let done = false, obs = null, poll = 0, timer = 0;
  const finish = (r) => {
    if (done) return; done = true;
    if (obs) obs.disconnect();
    clearInterval(poll); clearTimeout(timer);
    resolve(r);
  };
  const onChange = () => { const r = check(); if (r.done !== false) finish(r); };
  obs = new MutationObserver(onChange);
  obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
  poll = setInterval(onChange, 50);
  timer = setTimeout(() => finish(check()), Math.max(0, a.ms));
})"#
);

/// `{sel, label, by, values}` → `{value}` | `{fail}` | `{absent}` | `{notSent}`: selects the
/// options of a `<select>` named by `label` or `value` (all of them, for a multiple select),
/// announces it with `input` and `change`, and reads back the selected values.
pub const SELECT: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.label} is ${why}` };
  if (tag(el) !== 'select') return { fail: `${a.label} is ${describe(el)}, not a <select>; a custom dropdown takes page.click on its options` };
  if (a.values.length > 1 && !el.multiple) return { fail: `${a.label} takes one option (it is not a multiple select)` };
  const opts = [...el.options];
  const key = (o) => (a.by === 'label' ? norm(o.label || o.text) : o.value);
  const chosen = [];
  for (const v of a.values) {
    const want = a.by === 'label' ? norm(v) : v;
    const o = opts.find((o) => key(o) === want) || (a.by === 'label' ? opts.find((o) => key(o).toLowerCase() === want.toLowerCase()) : undefined);
    if (!o) {
      const known = opts.slice(0, 30).map((o) => `${JSON.stringify(norm(o.label || o.text))} (value ${JSON.stringify(o.value)})`).join(', ');
      return { fail: `${a.label} has no option with the ${a.by} ${JSON.stringify(v)}; its options are ${known}${opts.length > 30 ? ', …' : ''}` };
    }
    if (o.disabled) return { fail: `the option ${JSON.stringify(norm(o.label || o.text))} of ${a.label} is disabled` };
    chosen.push(o);
  }
  focusOn(el);
  for (const o of opts) o.selected = chosen.includes(o);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: valueOf(el) };
}"#
);

/// `{sel, label, checked}` → `{value, already}` | `{x, y}` | `{fail}` | `{absent}` |
/// `{notSent}`: checks a checkbox or radio (or an ARIA checkbox, radio or switch); `already`
/// when it is in the state asked for, else the point a click toggles it at (its label's when the
/// box itself is styled away).
pub const PREPARE_CHECK: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const role = roleOf(el);
  if (!isToggle(el) && !['checkbox', 'radio', 'switch', 'menuitemcheckbox', 'menuitemradio'].includes(role)) return { fail: `${a.label} is ${describe(el)}, not a checkbox or radio` };
  const now = valueOf(el);
  if (now === String(a.checked)) return { value: now, already: true };
  if ((el.type === 'radio' || role === 'radio') && !a.checked) return { fail: `${a.label} is a checked radio: a radio is unchecked by checking another of its group` };
  if (el.matches(':disabled') || el.getAttribute('aria-disabled') === 'true') return { fail: `${a.label} is disabled` };
  const why = unusable(el);
  if (why && el.labels && el.labels.length) {
    const l = el.labels[0];
    if (!unusable(l)) return clickPoint(l, a.label);
  }
  if (why) return { fail: `${a.label} is ${why}` };
  return clickPoint(el, a.label);
}"#
);

/// `{sel, label, multiple}` → `{ok}` | `{fail}` | `{absent}` | `{notSent}`: checks a file input
/// before the executor puts files in it.
pub const PREPARE_UPLOAD: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  if (tag(el) !== 'input' || el.type !== 'file') return { fail: `${a.label} is ${describe(el)}, not a file input (<input type=file>)` };
  if (el.matches(':disabled')) return { fail: `${a.label} is disabled` };
  if (a.multiple && !el.multiple) return { fail: `${a.label} takes one file (it has no multiple attribute)` };
  return { ok: true };
}"#
);

/// `{sel}` → the element itself (returned as a handle, not by value), or null.
pub const ELEMENT: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); return r.el || null;
}"#
);

/// `{sel, label}` → `{value}`: the names of the files a file input holds, joined by `,`.
pub const FILES: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  return { value: [...(r.el.files || [])].map((f) => f.name).join(',') };
}"#
);

/// `{sel, label}` → `{x, y, w, h}` | `{fail}` | `{absent}` | `{notSent}`: an element's box in
/// CSS pixels of the top document, after scrolling it into view (for a screenshot's clip).
pub const RECT: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why && !why.startsWith('disabled')) return { fail: `${a.label} is ${why}` };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const b = el.getBoundingClientRect();
  const p = toTop(el, b.left, b.top);
  const x = Math.max(0, p.x), y = Math.max(0, p.y);
  const w = Math.min(p.x + b.width, W.innerWidth) - x, h = Math.min(p.y + b.height, W.innerHeight) - y;
  if (w < 1 || h < 1) return { fail: `${a.label} has no visible area inside the viewport` };
  return { x: x + W.scrollX, y: y + W.scrollY, w, h };
}"#
);

/// `{first}` → the JSON text of `{url, title, nodes, refs, walked, cut, farAt}`: the page's outline, depth first, across
/// open shadow roots and reachable frames; every node with a role gets a ref numbered on from
/// `first`, and the refs are kept in this world (invisible to the page) for `locate`. Nodes
/// travel in short form (`d`, `r`, `n`, `v`, `s`, `x`; refs implied by their order, see
/// `OutlineNode`): a third fewer bytes to escape, send and parse on a large page. A frame
/// the world cannot reach shows as an `iframe` node with its origin. The walk stops after
/// 20,000 elements.
pub const SNAPSHOT: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const MAX_NODES = 20000;
  const nodes = [], els = [], far = [], farAt = [];
  let walked = 0, cut = false;
  const push = (n) => { if (nodes.length >= MAX_NODES) { cut = true; return false; } nodes.push(n); return true; };
  const states = (el, role) => {
    const s = [];
    const t = tag(el);
    const ac = el.getAttribute('aria-checked');
    if (isToggle(el) ? el.checked : ac === 'true') s.push('checked');
    else if ((isToggle(el) && el.indeterminate) || ac === 'mixed') s.push('mixed');
    if (t === 'option' ? el.selected : el.getAttribute('aria-selected') === 'true') s.push('selected');
    if ((typeof el.matches === 'function' && el.matches(':disabled')) || el.getAttribute('aria-disabled') === 'true') s.push('disabled');
    const ex = el.getAttribute('aria-expanded');
    if (ex === 'true' || (t === 'summary' && el.parentElement && tag(el.parentElement) === 'details' && el.parentElement.open)) s.push('expanded');
    if (el.required || el.getAttribute('aria-required') === 'true') s.push('required');
    if ((el.readOnly && (t === 'input' || t === 'textarea')) || el.getAttribute('aria-readonly') === 'true') s.push('readonly');
    return s;
  };
  const visit = (n, depth, quiet) => {
    if (cut || depth > 250) return;
    if (n.nodeType === 3) {
      if (quiet) return;
      const t = norm(n.data);
      if (t) push({ d: depth, r: 'text', n: clip(t, 300) });
      return;
    }
    if (n.nodeType === 9 || n.nodeType === 11) { for (let k = n.firstChild; k; k = k.nextSibling) visit(k, depth, quiet); return; }
    if (!isEl(n)) return;
    if (++walked > MAX_WALK) { cut = true; return; }
    const t = tag(n);
    if (hiddenQuick(n, t)) return;
    if (t === 'legend' && n.parentElement && tag(n.parentElement) === 'fieldset') return;
    if (t === 'label' && n.control) { for (const k of kids(n)) visit(k, depth, true); return; }
    const role = roleOf(n);
    if (!role) {
      if (n.shadowRoot || t === 'slot') for (const k of kids(n)) visit(k, depth, quiet);
      else for (let k = n.firstChild; k; k = k.nextSibling) visit(k, depth, quiet);
      return;
    }
    const node = { d: depth, r: role };
    const name = nameOf(n, role);
    if (name) node.n = clip(name, 300);
    const s = states(n, role);
    if (s.length) node.s = s;
    const href = role === 'link' ? n.href : null;
    if (href) node.x = 'url=' + clip(typeof href === 'string' ? href : String(href), 500);
    else if (role === 'heading') { const lv = /^h([1-6])$/.exec(t); node.x = 'level=' + (lv ? lv[1] : (n.getAttribute('aria-level') || '2')); }
    else if (t === 'input' && n.type === 'file') node.x = 'type=file';
    if (t === 'input' || t === 'textarea') {
      if (n.type === 'password') { if (n.value) node.v = '••••'; }
      else if (!isToggle(n) && !['button', 'submit', 'reset', 'image', 'file'].includes(n.type)) node.v = clip(n.value, 300);
      else if (n.type === 'file' && n.files && n.files.length) node.v = [...n.files].map((f) => f.name).join(', ');
    } else if (t === 'select') {
      node.v = clip([...n.selectedOptions].map((o) => norm(o.label || o.text)).join(', '), 300);
    } else if (role === 'textbox' && n.isContentEditable) {
      node.v = clip(norm(n.innerText), 300);
    }
    if (role === 'iframe') {
      let origin = '';
      try { origin = new URL(n.src, location.href).origin; } catch (e) { origin = ''; }
      const reach = frameDoc(n);
      node.x = `origin=${origin || 'unknown'}${reach ? '' : ' (content out of reach)'}`;
      if (!reach) { farAt.push(nodes.length); far.push(n); }
    }
    els.push(n);
    if (!push(node)) return;
    if (NAME_FROM_CONTENT.has(role) || t === 'input' || t === 'textarea' || (role === 'textbox' && n.isContentEditable)) return;
    // Most elements' children are their own; only a shadow host, a slot and a frame need
    // `kids` (and its array) to find what they show.
    const own = !(n.shadowRoot || t === 'slot' || role === 'iframe');
    const ks = own ? null : kids(n);
    const leaf = own ? n.firstChild && !n.firstElementChild : role !== 'iframe' && ks.length && ks.every((k) => k.nodeType !== 1);
    if (leaf && !FIELD_ROLES.has(role)) {
      const text = textOf(n);
      if (text && text !== node.n) node.v = clip(text, 300);
      return;
    }
    if (own) for (let k = n.firstChild; k; k = k.nextSibling) visit(k, depth + 1, false);
    else for (const k of ks) visit(k, depth + 1, false);
  };
  visit(document, 0, false);
  if (cut) nodes.push({ d: 0, r: 'text', n: `(the outline stops here: the page has more than ${MAX_WALK} elements or ${MAX_NODES} nodes)` });
  W.__polarisRefs = { first: a.first, els };
  W.__polarisFar = far;
  // One string: the protocol carries it far faster than the same nodes as objects.
  return JSON.stringify({ url: location.href, title: document.title, nodes, refs: els.length, walked, cut, farAt });
}"#
);

/// `{}` → `{origin, items}`: the document's origin and its local storage as `[key, value]`
/// pairs (none where the page may not use storage), for `task.saveProfile`.
pub const LOCAL_STORAGE: &str = r#"(a) => {
  let items = [];
  try { items = Object.entries(localStorage); } catch (e) { /* storage refused to this document */ }
  return { origin: location.origin, items };
}"#;

/// The script a task started with a profile runs in its first documents before their own
/// (SPEC §15): each origin the profile keeps gets its saved local storage back, a key the
/// document already holds left as it is.
pub fn seed_local_storage(storage: &[super::profiles::OriginStorage]) -> String {
    let saved: serde_json::Map<String, serde_json::Value> = storage
        .iter()
        .map(|o| (o.origin.clone(), serde_json::json!(o.items)))
        .collect();
    format!(
        r#"(() => {{
  const saved = {};
  const items = Object.prototype.hasOwnProperty.call(saved, location.origin) ? saved[location.origin] : null;
  if (!items) return;
  try {{ for (const [k, v] of items) if (localStorage.getItem(k) === null) localStorage.setItem(k, v); }} catch (e) {{ /* storage refused */ }}
}})()"#,
        serde_json::Value::Object(saved)
    )
}

/// `{}` → `{url, status, title}`: what the page loaded, for `task.start`, `page.navigate` and
/// `page.url`.
pub const LOADED: &str = r#"(a) => {
  const nav = performance.getEntriesByType('navigation')[0];
  return { url: location.href, status: nav && typeof nav.responseStatus === 'number' ? nav.responseStatus : 0, title: document.title };
}"#;

/// `{sel}` → `{far: true}` when `sel` names an iframe whose document this world cannot reach
/// (another origin), kept for [`PROBED`] and [`FRAME_OFFSET`]; else `{}` (the locator is
/// resolved here, or fails here with its reason).
pub const FRAME_PROBE: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return {};
  if ((tag(r.el) === 'iframe' || tag(r.el) === 'frame') && !frameDoc(r.el)) { W.__polarisProbe = r.el; return { far: true }; }
  return {};
}"#
);

/// `{i?}` → the iframe [`FRAME_PROBE`] found (or the `i`th out-of-reach frame of the latest
/// snapshot), as a handle.
pub const FRAME_ELEMENT: &str = r#"(a) => (a.i == null ? globalThis.__polarisProbe : (globalThis.__polarisFar || [])[a.i]) || null"#;

/// `{i?}` → `{x, y}` | `{fail}`: where the content of that iframe starts in the top viewport
/// (its box, border and padding), to place a point found inside it.
pub const FRAME_OFFSET: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const el = a.i == null ? W.__polarisProbe : (W.__polarisFar || [])[a.i];
  if (!el || !el.isConnected) return { fail: 'the frame left the page' };
  const r = el.getBoundingClientRect();
  const st = styleOf(el);
  return toTop(el, r.left + el.clientLeft + (st ? parseFloat(st.paddingLeft) || 0 : 0), r.top + el.clientTop + (st ? parseFloat(st.paddingTop) || 0 : 0));
}"#
);
