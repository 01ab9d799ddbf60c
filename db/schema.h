/* schema.h: precgate's database schema, as an ordered list of numbered migrations. */
#ifndef PG_SCHEMA_H
#define PG_SCHEMA_H

/* One migration: the DDL that moves a database from version - 1 to version,
 * and the PRAGMA that records version in user_version. (PRAGMA takes no bind
 * parameters, so the number is spelled into the text at compile time by
 * SCHEMA_MIGRATION in schema.c; store.c checks it against the index.) */
typedef struct schema_migration {
    int version;              /* the schema version this step produces: its index + 1 */
    const char *sql;          /* one or more statements, no parameters */
    const char *set_version;  /* "PRAGMA user_version = <version>" */
} schema_migration;

/* The migrations in order; schema_migrations[i].version == i + 1. Never edit
 * or reorder a released entry: append a new one. */
extern const schema_migration schema_migrations[];

/* How many entries schema_migrations holds (= the newest schema version). */
extern const int schema_migration_count;

#endif /* PG_SCHEMA_H */
