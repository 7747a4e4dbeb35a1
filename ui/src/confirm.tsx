// A small confirmation in the page (a modal <dialog>, no window.confirm): what is about to
// happen, Cancel first and focused, the action second; the hub's refusal shown in place.
import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";

export interface ConfirmProps {
  title: string;
  /** What the action does, in a sentence or two. */
  children: ComponentChildren;
  /** The action's button, e.g. "Release"; `busyLabel` while the call is out. */
  action: string;
  busyLabel: string;
  busy: boolean;
  /** Why the hub refused: the dialog then only closes. */
  error?: string;
  onConfirm: () => void;
  onClose: () => void;
}

export function ConfirmDialog(p: ConfirmProps) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current!;
    if (!d.open) d.showModal();
    return () => d.open && d.close();
  }, []);
  return (
    <dialog
      ref={ref}
      id="confirm"
      class="confirm"
      aria-labelledby="confirm-title"
      aria-describedby="confirm-body"
      onCancel={(e) => {
        // Escape: closes like Cancel, but not while the call is out.
        e.preventDefault();
        if (!p.busy) p.onClose();
      }}
    >
      <h2 id="confirm-title">{p.title}</h2>
      <div id="confirm-body" class="confirm-body">
        {p.children}
      </div>
      {p.error && (
        <p id="confirm-error" class="error" role="alert">
          {p.error}
        </p>
      )}
      <div class="confirm-buttons">
        <button type="button" class="quiet" data-cancel autofocus disabled={p.busy} onClick={p.onClose}>
          {p.error ? "Close" : "Cancel"}
        </button>
        {!p.error && (
          <button type="button" class="danger" data-confirm disabled={p.busy} onClick={p.onConfirm}>
            {p.busy ? p.busyLabel : p.action}
          </button>
        )}
      </div>
    </dialog>
  );
}
