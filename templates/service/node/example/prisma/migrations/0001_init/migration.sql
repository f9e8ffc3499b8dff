-- The items table, as `prisma migrate diff --from-empty --to-schema prisma/schema.prisma --script`
-- writes it for the Item model.
CREATE TABLE "items" (
    "id" TEXT NOT NULL,
    "seq" BIGSERIAL NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "items_pkey" PRIMARY KEY ("id")
);

CREATE UNIQUE INDEX "items_seq_key" ON "items"("seq");
