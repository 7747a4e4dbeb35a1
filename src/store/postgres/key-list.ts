/**
 * The keys of a read of several rows by key, as an `IN` list of a fixed length: the next power of
 * two at or above their count, filled up with the last key again (a key named twice still matches
 * its row once). `sql(list)` is the statement for one such list, with the keys its only
 * parameters, made once per length.
 *
 * Why not `= ANY($1::text[])`, one text for any number of keys: PostgreSQL plans a named
 * statement once per connection only while the plan it makes without the parameters' values (the
 * generic plan) looks no dearer than those it made with them (plancache.c, `choose_custom_plan`).
 * Of an array parameter it cannot know the length, so it reckons on more rows than a read of a
 * few keys finds, judges the generic plan dearer, and plans the statement again at every run: on
 * a table without statistics yet (a new database), and on one with many rows once it has them.
 * The authentication read and the head lock of every batch were planned at every run that way,
 * 50-80 us of the server's CPU each time, and so was a run-facts push's read of its projects'
 * owners (D85). An `IN` list of n parameters is reckoned at n keys with or without their values,
 * so its generic plan is taken after the first runs; lengths in powers of two keep the texts, and
 * the plans each connection keeps, to a handful.
 */
export function keyLists(sql: (list: string) => string) {
  const texts = new Map<number, string>();
  return <K>(keys: readonly K[]): { text: string; params: K[] } => {
    if (keys.length === 0) throw new Error("a read by key needs at least one key");
    let length = 1;
    while (length < keys.length) length *= 2;
    let text = texts.get(length);
    if (text === undefined) {
      const list = Array.from({ length }, (_, i) => `$${i + 1}`).join(", ");
      texts.set(length, (text = sql(list)));
    }
    const params = keys.slice();
    while (params.length < length) params.push(keys[keys.length - 1]!);
    return { text, params };
  };
}
