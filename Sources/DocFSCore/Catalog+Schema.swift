import GRDB

/// Migrations, never edited once released, so any earlier state directory is brought up to date.
extension Catalog {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE item (
                    inode INTEGER PRIMARY KEY AUTOINCREMENT,
                    id TEXT NOT NULL UNIQUE,
                    parent INTEGER REFERENCES item(inode) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    path TEXT NOT NULL UNIQUE,
                    kind INTEGER NOT NULL,
                    size INTEGER NOT NULL DEFAULT 0,
                    modified REAL NOT NULL DEFAULT 0,
                    etag TEXT,
                    symlinkTarget TEXT,
                    mode INTEGER,
                    state TEXT NOT NULL,
                    listedAt REAL
                );
                CREATE UNIQUE INDEX item_by_parent_and_name ON item(parent, name);
                INSERT INTO item (inode, id, parent, name, path, kind, state)
                    VALUES (1, 'root', NULL, '', '/', 1, 'directory');
                """)
        }
        migrator.registerMigration("v2-changes") { db in
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN onStore INTEGER NOT NULL DEFAULT 1;
                ALTER TABLE item ADD COLUMN owner INTEGER;
                ALTER TABLE item ADD COLUMN "group" INTEGER;
                ALTER TABLE item ADD COLUMN accessed REAL;
                ALTER TABLE item ADD COLUMN changed REAL;
                ALTER TABLE item ADD COLUMN uploadError TEXT;
                ALTER TABLE item ADD COLUMN conflictCopy TEXT;
                CREATE INDEX item_by_state ON item(state);
                """)
        }
        migrator.registerMigration("v3-nanosecond-times") { db in
            // REAL seconds cannot hold nanoseconds.
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN modifiedNs INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN accessedNs INTEGER;
                ALTER TABLE item ADD COLUMN changedNs INTEGER;
                UPDATE item SET modifiedNs = CAST(ROUND(modified * 1000000000) AS INTEGER),
                    accessedNs = CAST(ROUND(accessed * 1000000000) AS INTEGER),
                    changedNs = CAST(ROUND(changed * 1000000000) AS INTEGER);
                """)
        }
        migrator.registerMigration("v4-kind-known-for") { db in
            // S3 is asked once per version, not per listing.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN kindKnownFor TEXT")
        }
        migrator.registerMigration("v5-copy-journal") { db in
            // A copy's life (see CopyLife).
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN baseEtag TEXT;
                ALTER TABLE item ADD COLUMN committedSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN uploadedSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN uncommitted INTEGER NOT NULL DEFAULT 0;
                UPDATE item SET baseEtag = etag, committedSeq = 1 WHERE state IN ('modified', 'uploading');
                """)
        }
        migrator.registerMigration("v6-version-learned-at") { db in
            // When docfs itself last learned the version: an older listing must not take it back.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN versionAt REAL")
        }
        migrator.registerMigration("v7-copy-started-from-nothing") { db in
            try db.execute(sql: "ALTER TABLE item ADD COLUMN baseIsNothing INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v8-special-files") { db in
            try db.execute(sql: "ALTER TABLE item ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v9-pinned") { db in
            // The trigger pins what is added to a pinned folder, and fires only there.
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
                CREATE TRIGGER item_inherits_pin AFTER INSERT ON item
                WHEN NEW.parent IS NOT NULL AND (SELECT pinned FROM item WHERE inode = NEW.parent) = 1
                BEGIN UPDATE item SET pinned = 1 WHERE inode = NEW.inode; END;
                """)
        }
        migrator.registerMigration("v10-partial-copy") { db in
            // A streamed copy: `local`, yet only some bytes are there.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN partial INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v11-changes-under-way") { db in
            try db.execute(sql: """
                CREATE TABLE changeUnderWay (
                    inode INTEGER PRIMARY KEY REFERENCES item(inode) ON DELETE CASCADE,
                    kind TEXT NOT NULL,
                    gonePath TEXT NOT NULL,
                    toParent INTEGER,
                    toName TEXT,
                    committedSeq INTEGER NOT NULL
                )
                """)
        }
        migrator.registerMigration("v12-upload-trouble") { db in
            try db.execute(sql: "ALTER TABLE item ADD COLUMN uploadTrouble TEXT")
            try db.execute(sql: """
                UPDATE item SET uploadTrouble = CASE
                    WHEN uploadError LIKE 'refused by the store: %' THEN 'refused'
                    WHEN uploadError LIKE 'store unreachable%' OR uploadError LIKE 'store timed out%' THEN 'unreachable'
                    ELSE 'failed' END
                WHERE uploadError IS NOT NULL
                """)
        }
        migrator.registerMigration("v13-hard-links") { db in
            try db.execute(sql: "ALTER TABLE item ADD COLUMN links INTEGER NOT NULL DEFAULT 1")
        }
        return migrator
    }
}
