// The code editor: CodeMirror 6 with Python highlighting and indentation.
//
// Tab indents. To leave the editor with the keyboard, press Escape and then Tab (or Shift+Tab);
// Ctrl+M (Shift+Alt+M on macOS) switches Tab between indenting and moving focus.

import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { Prec } from "@codemirror/state";
import { keymap } from "@codemirror/view";
import { EditorView, basicSetup } from "codemirror";

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
      EditorView.contentAttributes.of({ "aria-label": "Your solution (Python)" }),
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
