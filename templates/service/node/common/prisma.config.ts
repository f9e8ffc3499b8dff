// Prisma 7's configuration: where the schema and migrations are. The database URL is read by the
// service (DATABASE_URL), not by Prisma: `prisma migrate` cannot run offline (see README), so the
// service applies prisma/migrations itself.
import { defineConfig } from "prisma/config";

export default defineConfig({
  schema: "prisma/schema.prisma",
  migrations: { path: "prisma/migrations" },
});
