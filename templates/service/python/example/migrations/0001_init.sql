-- Items. `seq` orders them by creation (timestamps can tie) and is what page tokens point after.
CREATE TABLE items (
  id text PRIMARY KEY,
  seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now()
);
