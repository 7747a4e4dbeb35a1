/**
 * What is in flight now (answers under way, store calls running), for whoever needs all of it at
 * once: a drain that closes each connection once its answer is out, a close that waits for the
 * calls still running. Each entry is added when its thing starts and deleted when it ends, many
 * times a second, and the registry lives as long as the process.
 *
 * Not a Set or a Map, on purpose (D88). V8 replaces a Set's hash table when it fills up, which
 * entries that come and go make it do every few additions, and the table it replaces keeps the
 * entries it held and a link to its replacement. Once one of those tables has reached the old
 * generation (the registry sat still for a moment: at start, between loads), each table after
 * it is held by the one before, so every entry that ever passed through survives the young
 * generation's collections, and is promoted with everything it reaches (a request, its response,
 * the call behind them). Under the lease load a Set of the answers under way made the hub
 * promote about 5 MB at each young collection and pause 7-9 ms for each (bench/steps.md,
 * twenty-third step); test/unit/in-flight.test.ts shows it in a few lines.
 *
 * Here each entry is a node of a doubly linked list, and deleting one clears its links: nothing
 * dead points at anything newer, even an entry that grew old before it ended (a slow call).
 */
export class InFlight<T> {
  /** The list's ends: `#head.next` is the oldest entry, `#head.prev` the newest. */
  readonly #head: Entry<T> = { value: undefined, prev: undefined, next: undefined };
  #size = 0;

  constructor() {
    this.#head.prev = this.#head;
    this.#head.next = this.#head;
  }

  get size(): number {
    return this.#size;
  }

  /** Adds `value`; the entry returned is what `delete` takes. */
  add(value: T): InFlightEntry {
    const last = this.#head.prev!;
    const entry: Entry<T> = { value, prev: last, next: this.#head };
    last.next = entry;
    this.#head.prev = entry;
    this.#size++;
    return entry;
  }

  /** Deletes an entry `add` returned; deleting it again does nothing. */
  delete(handle: InFlightEntry): void {
    const entry = handle as Entry<T>;
    if (entry.prev === undefined) return;
    entry.prev.next = entry.next;
    entry.next!.prev = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
    entry.value = undefined;
    this.#size--;
  }

  /** The values in flight now, oldest first (a copy: adding or deleting meanwhile is safe). */
  values(): T[] {
    const out: T[] = [];
    for (let e = this.#head.next!; e !== this.#head; e = e.next!) out.push(e.value as T);
    return out;
  }
}

/** An entry of an InFlight registry, as `add` returns it (opaque). */
export interface InFlightEntry {
  readonly __inFlightEntry?: never;
}

interface Entry<T> extends InFlightEntry {
  value: T | undefined;
  prev: Entry<T> | undefined;
  next: Entry<T> | undefined;
}
