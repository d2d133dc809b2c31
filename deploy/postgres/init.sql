-- The role and the database of the fleet's store (docs/ledger.md, "Setting up PostgreSQL"). Run once, as a
-- superuser, before the first replica starts:
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -v pw="$PGPASSWORD" -f deploy/postgres/init.sql
-- tailgate creates and migrates its own tables at first use; it never creates roles or databases.
-- (Compose: the postgres image does the same from POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB.)
CREATE ROLE tailgate LOGIN PASSWORD :'pw';
CREATE DATABASE tailgate OWNER tailgate;
