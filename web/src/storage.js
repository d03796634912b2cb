// What the browser remembers per problem: the learner's draft, whether it was solved, and how
// many hints were shown.

const key = (kind, slug) => `grpo-kit:${kind}:${slug}`;

function read(name) {
  try {
    return localStorage.getItem(name);
  } catch {
    return null; // storage disabled (private mode, file://): the page still works, unsaved
  }
}

function write(name, value) {
  try {
    if (value === null) localStorage.removeItem(name);
    else localStorage.setItem(name, value);
  } catch {
    // Quota or disabled storage: losing the autosave must not break the editor.
  }
}

export const loadDraft = (slug) => read(key("draft", slug));
export const saveDraft = (slug, code) => write(key("draft", slug), code);
export const clearDraft = (slug) => write(key("draft", slug), null);
export const hasDraft = (slug) => read(key("draft", slug)) !== null;
export const isSolved = (slug) => read(key("solved", slug)) === "1";
export const markSolved = (slug) => write(key("solved", slug), "1");
export const hintsShown = (slug) => Number(read(key("hints", slug)) ?? 0);
export const setHintsShown = (slug, count) => write(key("hints", slug), String(count));
