// The `--credentials FILE` reader, offered to other commands (`docfs serve`) so that every
// credentials file docfs reads has one format (`user=` / `password=` lines) and one rule (a
// regular file that group and others cannot read, else refused with the chmod to run).

extension StoreLocator {
    /// The user and password of a credentials file, read exactly as `docfs mount` reads it.
    public static func credentialsFile(_ path: String) throws(StoreLocatorError) -> (user: String, password: String) {
        let credentials = try readCredentialsFile(path)
        return (credentials.user, credentials.password)
    }
}
