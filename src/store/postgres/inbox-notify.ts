import pg from "pg";

/** The channel migration 009's trigger notifies when inbox events are added. */
const channel = "kxm_inbox";
/** After a lost connection, how long before listening again (the tail's ticks go on meanwhile). */
const retryMs = 1_000;

/**
 * Listens, on a connection of its own, for the inbox events other replicas commit (migration
 * 009: a statement that adds them notifies `kxm_inbox` with its replica's name, migration 010), and
 * calls `onOther` for each one another replica committed, so the tail (tail.ts) looks at once:
 * a message sent through one hub reaches a Subscribe stream on another without waiting for a
 * tick. Nothing depends on it: a lost connection is opened again after `retryMs`, and until
 * then the tail's ticks find the events.
 */
export function listenForInbox(config: pg.ClientConfig, self: string, onOther: () => void): { listening: Promise<void>; close(): Promise<void> } {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let listened!: () => void;
  /** Resolves when it first listens. */
  const listening = new Promise<void>((resolve) => (listened = resolve));

  function again(): void {
    client = undefined;
    if (!closed) retry = setTimeout(open, retryMs).unref();
  }

  function open(): void {
    const c = new pg.Client(config);
    client = c;
    let lost = false;
    const lose = () => {
      if (lost) return;
      lost = true;
      c.end().catch(() => {});
      if (client === c) again();
    };
    c.on("error", lose);
    c.on("end", lose);
    c.on("notification", (n) => {
      if (n.channel === channel && n.payload !== self) onOther();
    });
    c.connect()
      .then(() => c.query(`LISTEN ${channel}`))
      .then(() => listened(), lose);
  }

  open();
  return {
    listening,
    async close() {
      closed = true;
      clearTimeout(retry);
      await client?.end().catch(() => {});
    },
  };
}
