/**
 * Reads a SentencePiece `tokenizer.model` (a serialized `ModelProto`, sentencepiece_model.proto)
 * far enough for GGUF: the pieces with their scores and types, the model type, the special ids and
 * whether a space is prepended. Checkpoints that ship only this file (no tokenizer.json) keep their
 * real scores this way. A few lines of protobuf wire-format decoding, not a protobuf dependency.
 */

export type SentencePieceModel = {
  pieces: { piece: string; score: number; type: number }[];
  /** TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char. */
  modelType: number;
  unkId: number;
  bosId: number;
  eosId: number;
  padId: number;
  /** NormalizerSpec.add_dummy_prefix: a "▁" before the text (llama.cpp's add_space_prefix). */
  addDummyPrefix: boolean;
};

export class SentencePieceError extends Error {}

/** Protobuf field → value(s): varints as bigint (int32 -1 is ten bytes), fixed32 as its bytes, length-delimited as bytes. */
type Field = { number: number; wire: number; varint?: bigint; bytes?: Uint8Array };

function* fields(buf: Uint8Array): Generator<Field> {
  let pos = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (pos >= buf.length || shift > 63n)
        throw new SentencePieceError("tokenizer.model is not a SentencePiece model (bad varint)");
      const b = buf[pos++]!;
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  const take = (n: number): Uint8Array => {
    if (pos + n > buf.length) throw new SentencePieceError("tokenizer.model is truncated");
    const out = buf.subarray(pos, pos + n);
    pos += n;
    return out;
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const number = key >>> 3;
    const wire = key & 7;
    if (wire === 0) yield { number, wire, varint: varint() };
    else if (wire === 1) yield { number, wire, bytes: take(8) };
    else if (wire === 2) yield { number, wire, bytes: take(Number(varint())) };
    else if (wire === 5) yield { number, wire, bytes: take(4) };
    else throw new SentencePieceError("tokenizer.model is not a SentencePiece model (unknown wire type)");
  }
}

/** int32 fields are sign-extended to 64 bits on the wire. */
const int32 = (v: bigint): number => Number(BigInt.asIntN(32, v));

export function parseSentencePiece(buf: Uint8Array): SentencePieceModel {
  const model: SentencePieceModel = {
    pieces: [],
    modelType: 1,
    unkId: 0,
    bosId: 1,
    eosId: 2,
    padId: -1,
    addDummyPrefix: true,
  };
  const utf8 = new TextDecoder("utf-8", { fatal: false });
  for (const f of fields(buf)) {
    if (f.number === 1 && f.bytes) {
      const piece = { piece: "", score: 0, type: 1 };
      for (const p of fields(f.bytes)) {
        if (p.number === 1 && p.bytes) piece.piece = utf8.decode(p.bytes);
        else if (p.number === 2 && p.bytes && p.wire === 5)
          piece.score = new DataView(p.bytes.buffer, p.bytes.byteOffset, 4).getFloat32(0, true);
        else if (p.number === 3 && p.varint !== undefined) piece.type = int32(p.varint);
      }
      model.pieces.push(piece);
    } else if (f.number === 2 && f.bytes) {
      for (const t of fields(f.bytes)) {
        if (t.varint === undefined) continue;
        if (t.number === 3) model.modelType = int32(t.varint);
        else if (t.number === 40) model.unkId = int32(t.varint);
        else if (t.number === 41) model.bosId = int32(t.varint);
        else if (t.number === 42) model.eosId = int32(t.varint);
        else if (t.number === 43) model.padId = int32(t.varint);
      }
    } else if (f.number === 3 && f.bytes) {
      for (const n of fields(f.bytes))
        if (n.number === 3 && n.varint !== undefined) model.addDummyPrefix = n.varint !== 0n;
    }
  }
  if (model.pieces.length === 0)
    throw new SentencePieceError("tokenizer.model holds no pieces (not a SentencePiece model?)");
  return model;
}
