import GRDB

/// The catalog's tables, as migrations: one per change of the schema, never edited once
/// released, so a state directory of any earlier docfs opens and is brought up to date.
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
            // REAL seconds cannot hold nanoseconds; these integer columns replace them.
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
            // The version (ETag) at which the item's kind was last confirmed. A store whose
            // listings cannot show links (S3) is asked once per version, not once per listing.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN kindKnownFor TEXT")
        }
        migrator.registerMigration("v5-copy-journal") { db in
            // The life of a local copy (see CopyLife): the store version it started from
            // (`baseEtag`, what uploads are conditional on; a refresh moves `etag` only), the
            // latest content a close/fsync committed and the latest one the store confirmed
            // (`committedSeq`/`uploadedSeq`), and whether writes since the last commit may be
            // in the copy (`uncommitted`: such bytes are never uploaded over the store's version).
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN baseEtag TEXT;
                ALTER TABLE item ADD COLUMN committedSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN uploadedSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN uncommitted INTEGER NOT NULL DEFAULT 0;
                UPDATE item SET baseEtag = etag, committedSeq = 1 WHERE state IN ('modified', 'uploading');
                """)
        }
        migrator.registerMigration("v6-version-learned-at") { db in
            // When docfs itself last learned an item's version from the store (an upload, a
            // download, a rename, a create): a listing asked before that knows less, and must
            // not take it back (an older ETag would make the next upload a false conflict; a
            // missing entry would drop a file just uploaded).
            try db.execute(sql: "ALTER TABLE item ADD COLUMN versionAt REAL")
        }
        migrator.registerMigration("v7-copy-started-from-nothing") { db in
            // A copy of a new file (see CopyLife.startedFromNothing): its uploads create, never
            // replace, until the store confirms one.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN baseIsNothing INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v8-special-files") { db in
            // The device number of a character or block device (kinds 3-6 are FIFOs, devices
            // and sockets, see SpecialFile).
            try db.execute(sql: "ALTER TABLE item ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v9-pinned") { db in
            // Items the user asked to keep local (`docfs pin`, see Catalog+Pinning.swift). A
            // pinned copy outlives its release and the mount. An item added to a pinned folder
            // (a create here, or a listing) is pinned too: the trigger fires only in pinned
            // folders, so a listing elsewhere writes no extra row.
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
                CREATE TRIGGER item_inherits_pin AFTER INSERT ON item
                WHEN NEW.parent IS NOT NULL AND (SELECT pinned FROM item WHERE inode = NEW.parent) = 1
                BEGIN UPDATE item SET pinned = 1 WHERE inode = NEW.inode; END;
                """)
        }
        migrator.registerMigration("v10-partial-copy") { db in
            // A copy filled by ranges on demand (a streamed file): `local`, yet only some of its
            // bytes are there. A pinned one kept by a killed daemon must not be taken for the
            // whole file (its holes would read as zeros, and an edit would upload them).
            try db.execute(sql: "ALTER TABLE item ADD COLUMN partial INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v11-changes-under-way") { db in
            // A removal or rename sent to the store whose catalog change has not followed yet
            // (see Catalog+ChangesUnderWay.swift). A row goes with its item.
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
            // What kind of failure `uploadError` is (`UploadTrouble`), for those who decide on it.
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
            // How many names the store gives a file (hard links on the local store), as listed.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN links INTEGER NOT NULL DEFAULT 1")
        }
        return migrator
    }
}
