//! The JavaScript the executor evaluates in a page: element lookup and the checks made before
//! anything is dispatched, reading a value, and watching for an expectation.
//!
//! Each is a function of one JSON argument, evaluated as `(FUNCTION)(ARGUMENT)` with the result
//! returned by value. None of them changes what the page shows or sends: focusing a field and
//! scrolling an element into view are the only effects, and input itself is dispatched as real
//! browser events by the executor, never synthesised here (except for the value of a `<select>`,
//! a date or a number field, which no key sequence sets reliably).

/// Helpers shared by every script: `locate(sel)` → `{el}` | `{absent}` | `{fail}`,
/// `unusable(el)` → why the element cannot take input (or null), `valueOf(el)`.
macro_rules! prelude {
    () => {
        r#"
const locate = (sel) => {
  let el;
  try { el = document.querySelector(sel); }
  catch (e) { return { fail: `${sel} is not a valid CSS selector (${e.message})` }; }
  if (!el) return { absent: `no element matches ${sel} on ${location.href}` };
  return { el };
};
const describe = (el) => `<${el.localName}${el.id ? '#' + el.id : ''}${typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : ''}>`;
const unusable = (el) => {
  if (!el.isConnected) return 'no longer in the document';
  const s = getComputedStyle(el);
  if (s.display === 'none') return 'hidden (display: none)';
  if (s.visibility === 'hidden' || s.visibility === 'collapse') return 'hidden (visibility: hidden)';
  if (el.getClientRects().length === 0) return 'not rendered (it has no layout box)';
  if (el.matches(':disabled')) return 'disabled';
  if (el.getAttribute('aria-disabled') === 'true') return 'disabled (aria-disabled)';
  return null;
};
const valueOf = (el) => {
  if (el instanceof HTMLInputElement && (el.type === 'checkbox' || el.type === 'radio')) return String(el.checked);
  if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement) return el.value;
  const t = typeof el.innerText === 'string' ? el.innerText : (el.textContent || '');
  return t.trim();
};
"#
    };
}

/// `{sel, value}` → `{fail}` | `{absent}` | `{mode}`: checks a field, focuses it and selects its
/// content so that typed text replaces it. `mode` is `type` (text the executor inserts with
/// `Input.insertText`), `editable` (a contenteditable element, likewise) or `set` (a select,
/// date, number… whose value [`SET_VALUE`] sets).
pub const PREPARE_FILL: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.sel} is ${why}` };
  if (el.readOnly) return { fail: `${a.sel} is read-only` };
  let mode;
  if (el instanceof HTMLTextAreaElement) mode = 'type';
  else if (el instanceof HTMLInputElement) {
    const t = el.type;
    if (['text', 'search', 'url', 'tel', 'password', 'email'].includes(t)) mode = 'type';
    else if (['number', 'date', 'time', 'datetime-local', 'month', 'week', 'color', 'range'].includes(t)) mode = 'set';
    else return { fail: `${a.sel} is an <input type=${t}>, which holds no typed text: it cannot be filled. A checkbox or radio changes with a page.click whose expect reads its new checked state; Polaris cannot put files in a file input yet` };
  } else if (el instanceof HTMLSelectElement) {
    if (![...el.options].some((o) => o.value === a.value)) return { fail: `${a.sel} has no option with the value ${JSON.stringify(a.value)}` };
    mode = 'set';
  } else if (el.isContentEditable) mode = 'editable';
  else return { fail: `${a.sel} is a ${describe(el)}, not a form field or an editable element` };
  el.scrollIntoView({ block: 'center', inline: 'nearest', behavior: 'instant' });
  el.focus({ preventScroll: true });
  if (document.activeElement !== el && !el.contains(document.activeElement)) return { fail: `${a.sel} could not be focused` };
  if (mode === 'type') el.select();
  else if (mode === 'editable') {
    const range = document.createRange(); range.selectNodeContents(el);
    const s = getSelection(); s.removeAllRanges(); s.addRange(range);
  }
  return { mode };
}"#
);

/// `{sel, value}` → `{value}` | `{absent}`: sets the value of a select, date, number… field the
/// way a picker does, and announces it with `input` and `change`.
pub const SET_VALUE: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const proto = el instanceof HTMLSelectElement ? HTMLSelectElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, a.value);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: valueOf(el) };
}"#
);

/// `{sel}` → `{value}` | `{absent}`: announces a typed value with `change` (as leaving the
/// field would) and reads it back.
pub const FINISH_FILL: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  r.el.dispatchEvent(new Event('change', { bubbles: true }));
  return { value: valueOf(r.el) };
}"#
);

/// `{sel}` → `{fail}` | `{absent}` | `{x, y}`: checks an element, scrolls it into view and finds
/// the viewport point at its centre that a click would hit (refusing one covered by another
/// element).
pub const PREPARE_CLICK: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.sel} is ${why}` };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const boxes = [el.getBoundingClientRect(), ...el.getClientRects()];
  let covered = null;
  for (const b of boxes) {
    if (b.width < 1 || b.height < 1) continue;
    const x = b.left + b.width / 2, y = b.top + b.height / 2;
    if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) continue;
    const hit = document.elementFromPoint(x, y);
    if (hit && (hit === el || el.contains(hit))) return { x, y };
    if (hit) covered = hit;
  }
  if (covered) return { fail: `${a.sel} is covered by ${describe(covered)} at its centre` };
  return { fail: `${a.sel} has no visible point inside the viewport` };
}"#
);

/// `{sel}` → `{fail}` | `{absent}` | `{ok}`: checks an element and gives it the focus, for a key
/// press.
pub const PREPARE_KEY: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  const el = r.el;
  const why = unusable(el); if (why) return { fail: `${a.sel} is ${why}` };
  el.scrollIntoView({ block: 'center', inline: 'nearest', behavior: 'instant' });
  el.focus({ preventScroll: true });
  if (document.activeElement !== el && !el.contains(document.activeElement)) return { fail: `${a.sel} could not be focused` };
  return { ok: true };
}"#
);

/// `{sel}` → `{value}` | `{absent}` | `{fail}`: reads a target without changing anything.
pub const READ: &str = concat!(
    "(a) => {",
    prelude!(),
    r#"
  const r = locate(a.sel); if (!r.el) return r;
  return { value: valueOf(r.el) };
}"#
);

/// `{sel, op, want, ms}` → a promise of `{holds, value}` | `{absent}` | `{fail}`: resolves as soon
/// as the target's value `equals`/`contains` `want`, or after `ms` with what was last seen.
/// Watches DOM mutations and input events, with a slow poll behind them for values set by script.
pub const WATCH: &str = concat!(
    "(a) => new Promise((resolve) => {",
    prelude!(),
    r#"
  const check = () => {
    const r = locate(a.sel); if (!r.el) return r;
    const value = valueOf(r.el);
    const holds = a.op === 'equals' ? value === a.want : value.includes(a.want);
    return { holds, value };
  };
  const first = check();
  if (first.holds || first.fail) { resolve(first); return; }
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

/// `{}` → `{url, status, title}`: what the page loaded, for `task.start`.
pub const LOADED: &str = r#"(a) => {
  const nav = performance.getEntriesByType('navigation')[0];
  return { url: location.href, status: nav && typeof nav.responseStatus === 'number' ? nav.responseStatus : 0, title: document.title };
}"#;
