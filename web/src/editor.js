// The code editor: CodeMirror 6 with Python highlighting and indentation, colours from the
// page's CSS variables (so dark mode and contrast are the stylesheet's business), and a mark
// on the line of a problem of the whole file (a syntax error, say).
//
// Tab indents. To leave the editor with the keyboard, press Escape and then Tab (or Shift+Tab);
// Ctrl+M (Shift+Alt+M on macOS) switches Tab between indenting and moving focus.

import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { HighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { lintGutter, setDiagnostics } from "@codemirror/lint";
import { EditorSelection, Prec } from "@codemirror/state";
import { keymap } from "@codemirror/view";
import { tags } from "@lezer/highlight";
import { EditorView, basicSetup } from "codemirror";

const colour = (name) => `var(--code-${name})`;
const highlight = HighlightStyle.define([
  { tag: [tags.keyword, tags.controlKeyword, tags.operatorKeyword, tags.definitionKeyword], color: colour("keyword") },
  { tag: [tags.string, tags.special(tags.string), tags.regexp], color: colour("string") },
  { tag: [tags.number, tags.bool, tags.null, tags.atom], color: colour("number") },
  { tag: tags.comment, color: colour("comment"), fontStyle: "italic" },
  { tag: [tags.function(tags.definition(tags.variableName)), tags.definition(tags.className)], color: colour("definition") },
  { tag: [tags.function(tags.variableName), tags.standard(tags.variableName)], color: colour("call") },
  { tag: [tags.self, tags.propertyName], color: colour("property") },
  { tag: tags.invalid, color: colour("invalid") },
]);

const theme = EditorView.theme({
  "&": { color: "var(--fg)", backgroundColor: "var(--bg)" },
  ".cm-content": { caretColor: "var(--fg)" },
  ".cm-cursor, .cm-dropCursor": { borderLeftColor: "var(--fg)" },
  ".cm-gutters": { backgroundColor: "var(--bg-soft)", color: "var(--muted)", borderRight: "1px solid var(--line)" },
  ".cm-activeLine": { backgroundColor: "var(--code-active-line)" },
  ".cm-activeLineGutter": { backgroundColor: "var(--code-active-line)", color: "var(--fg)" },
  "&.cm-focused .cm-selectionBackground, .cm-selectionBackground, .cm-content ::selection": {
    backgroundColor: "var(--code-selection)",
  },
  ".cm-matchingBracket": { backgroundColor: "var(--code-selection)", outline: "1px solid var(--muted)" },
});

export function createEditor(parent, doc, { onRun, onChange }) {
  const runKeys = keymap.of([{ key: "Mod-Enter", run: () => (onRun(), true) }]);
  return new EditorView({
    doc,
    parent,
    extensions: [
      Prec.highest(runKeys), // before basicSetup's Enter handling
      basicSetup,
      keymap.of([indentWithTab]),
      python(),
      syntaxHighlighting(highlight), // replaces basicSetup's fallback colours
      theme,
      lintGutter(),
      // tabindex: the editor's scrolling area has a focusable element for axe, not only for us.
      EditorView.contentAttributes.of({ "aria-label": "Your solution (Python)", tabindex: "0" }),
      EditorView.updateListener.of((update) => {
        if (update.docChanged) onChange(update.state.doc.toString());
      }),
    ],
  });
}

export function getCode(view) {
  return view.state.doc.toString();
}

export function setCode(view, code) {
  view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: code } });
}

function lineRange(view, line, column) {
  const doc = view.state.doc;
  const { from, to } = doc.line(Math.min(Math.max(line, 1), doc.lines));
  const at = column ? Math.min(from + column - 1, to) : from;
  return { from: at, to: Math.max(to, at) };
}

// Marks each problem {line, column, message} in the gutter and under its line; none clears.
export function markProblems(view, problems) {
  const diagnostics = problems
    .filter((problem) => problem.line)
    .map((problem) => ({ ...lineRange(view, problem.line, problem.column), severity: "error", message: problem.message }));
  view.dispatch(setDiagnostics(view.state, diagnostics));
}

// Puts the cursor on `line` (1-based), scrolls it into view and focuses the editor.
export function goToLine(view, line) {
  const { from } = lineRange(view, line, null);
  view.dispatch({ selection: EditorSelection.cursor(from), scrollIntoView: true });
  view.focus();
}
