-- holders: the keys of the operations that held the guard scope on the card
-- the approver saw, as a JSON array ('' for permits granted before this
-- column: they saw none). An override permit lets its call through a clash
-- with these operations only.
ALTER TABLE permits ADD COLUMN holders TEXT NOT NULL DEFAULT '';
