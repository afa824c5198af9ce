import GRDB

extension Database {
    /// GRDB compiles and authorizes each `execute(sql:)` anew, a fifth of a big listing's time.
    /// Only for SQL without interpolated values (arguments go in `arguments`).
    func cachedExecute(sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}
