// Tests: test/**/*.test.ts; coverage of src/ without the generated stubs and Prisma client.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    coverage: {
      include: ["src/**/*.ts"],
      exclude: ["src/__generated__/**"],
    },
  },
});
