/** The evaluation tests' datasets: short stories in the fixture tokenizer's words, and multiple-choice questions about them. */
export const TEXTS = [
  "Once upon a time, there was a little girl named Lily.",
  "The little dog ran to the park.",
  "Lily and Tom played with a big red ball in the garden. They were very happy.",
  "One day, a boy went to the store with his mom.",
];

/** Choices as written (a leading space where a word follows); two contexts end in a space lm-eval moves. */
export const QUESTIONS: [string, string[], number][] = [
  ["Once upon a time, there was a little", [" girl", " dog named Max", " tree"], 0],
  ["The little dog ran to the", [" park", " big red ball", " house with a red door"], 0],
  ["Lily and Tom played with a ", ["ball", "little cat in the garden", "toy"], 0],
  ["One day, a boy went to the", [" store", " big blue sea", " park with his mom"], 2],
  ["She was very happy because she had a new", [" toy", " friend", " red hat with a flower"], 1],
  ["The cat sat on the ", ["mat", "big soft bed", "tree"], 0],
  ["Tim wanted to play outside, but it was", [" raining", " very cold and dark", " late"], 0],
  ["The bird flew up into the", [" sky", " tall green tree", " sun"], 1],
  ["Ben found a shiny", [" rock", " coin in the sand", " key"], 2],
  ["They played all day and were very", [" tired", " happy together", " hungry"], 1],
];
