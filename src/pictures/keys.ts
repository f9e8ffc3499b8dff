/**
 * Where generated images lie in the artifact store: `images/<hour>/<32 hex>.png`, the hour (epoch
 * seconds of its start) being when the replica wrote it, so that what no answer took (its client
 * left, the gateway died) is found and removed by age without a record of each (urls.ts).
 */
export const PICTURES_PREFIX = "images";
const HOUR_MS = 3_600_000;

export function pictureKey(now: number, id: string): string {
  return `${PICTURES_PREFIX}/${Math.floor(now / HOUR_MS) * 3600}/${id}.png`;
}

/** A key a worker's result may name: one of pictureKey's, nothing else in the store. */
export function isPictureKey(key: string): boolean {
  return /^images\/\d{1,12}\/[0-9a-f]{32}\.png$/.test(key);
}

/** The hour bucket a key lies in, epoch ms; undefined for another key. */
export function hourOf(key: string): number | undefined {
  const m = /^images\/(\d{1,12})\//.exec(key);
  return m ? Number(m[1]) * 1000 : undefined;
}
