/**
 * The items `handed` holds that continue a stream at `last`: its contiguous run from `last + 1`
 * (removed from `handed`), after dropping what the stream is past. Empty when the next item is
 * not there (never handed over, or dropped past a cap): the store has it.
 */
export function takeContiguous<E extends { seq: number }>(handed: E[], last: number): E[] {
  let skip = 0;
  while (skip < handed.length && handed[skip]!.seq <= last) skip++;
  let n = 0;
  while (skip + n < handed.length && handed[skip + n]!.seq === last + 1 + n) n++;
  if (n === 0) {
    handed.splice(0, skip);
    return [];
  }
  return handed.splice(0, skip + n).slice(skip);
}
