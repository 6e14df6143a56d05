/* The scripts' translations, as ES module functions. Django's JavaScriptCatalog (the script at
   /i18n/js/, which templates/base.html loads before any module) defines window.gettext and its
   kin in the visitor's language; a page without it (a module loaded on its own) gets the English
   text, substituted the same way. `makemessages -d djangojs` finds the strings by these names. */
const catalog = window;

export function gettext(msgid) {
  return typeof catalog.gettext === "function" ? catalog.gettext(msgid) : msgid;
}

export function ngettext(singular, plural, count) {
  if (typeof catalog.ngettext === "function") return catalog.ngettext(singular, plural, count);
  return count === 1 ? singular : plural;
}

export function pgettext(context, msgid) {
  return typeof catalog.pgettext === "function" ? catalog.pgettext(context, msgid) : msgid;
}

/* "%(name)s" from an object when named, else each "%s" from an array in turn (Django's rules). */
export function interpolate(format, values, named) {
  if (typeof catalog.interpolate === "function") return catalog.interpolate(format, values, named);
  if (named) return format.replace(/%\(\w+\)s/g, (match) => String(values[match.slice(2, -2)]));
  const rest = Array.from(values);
  return format.replace(/%s/g, () => String(rest.shift()));
}
