-- Sample orders for `make demo`: four transactions, the third rolled back.
BEGIN;
INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES
  ('Customer', 'c-17', 'CustomerRegistered', '{"customer": "c-17", "name": "Ada"}'),
  ('Order', 'o-1001', 'OrderPlaced', '{"order": "o-1001", "customer": "c-17", "total": 42.50}');
COMMIT;
BEGIN;
INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES
  ('Order', 'o-1001', 'OrderPaid', '{"order": "o-1001", "amount": 42.50}'),
  ('Order', 'o-1002', 'OrderPlaced', '{"order": "o-1002", "customer": "c-17", "total": 7.00}');
COMMIT;
BEGIN;
INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES
  ('Order', 'o-9999', 'OrderPlaced', '{"order": "o-9999", "note": "rolled back: must never appear"}');
ROLLBACK;
BEGIN;
INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES
  ('Order', 'o-1001', 'OrderShipped', '{"order": "o-1001", "carrier": "DHL"}');
COMMIT;
