-- A one-line summary of each operation for people (tool, object, amount,
-- key; nothing secret), shown on other plans' approval cards.
ALTER TABLE operations ADD COLUMN summary TEXT NOT NULL DEFAULT '';
