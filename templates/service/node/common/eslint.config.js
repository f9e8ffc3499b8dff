// ESLint (flat config): JavaScript's and typescript-eslint's recommended rules. Generated code
// (src/__generated__: proto stubs, Prisma's client) and build output are not linted.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "coverage/", "src/__generated__/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // `_request`: a parameter a handler does not use yet, named so it is clear on purpose.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
);
