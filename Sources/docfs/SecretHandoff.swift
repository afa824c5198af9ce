// SecretHandoff: keeps secrets out of what `ps` and /proc show of a docfs process. A store URL
// with `user:password@` and the secret variables (DOCFS_PASSWORD, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN) are taken out of the process's own argv and environment block in place
// (the memory /proc/PID/cmdline and /proc/PID/environ read), and reach the background daemon
// on a pipe that is its standard input, never in its argv or its environment.

import DocFSStores
import Foundation
import Glibc

struct SecretHandoff: Equatable {
    /// Environment variables whose values are secrets.
    static let secretVariables = ["DOCFS_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]

    /// The store argument as given, with its credentials; nil when it carries none.
    var storeArgument: String?
    /// The secret variables that were set, by name.
    var variables: [String: String] = [:]

    var isEmpty: Bool { storeArgument == nil && variables.isEmpty }

    /// Takes the secrets out of this process: the store argument `store` (when it carries
    /// credentials) is replaced by its redacted form in the argv memory, and the secret
    /// variables are unset and their bytes zeroed in the environment memory. No core file is
    /// written afterwards and the process is not dumpable (`noCoreFiles`), so the secrets kept
    /// in memory do not reach a core file or another process of the same user either.
    static func take(storeArgument store: String) -> SecretHandoff {
        var handoff = SecretHandoff()
        let redacted = StoreLocator.redacted(store)
        if redacted != store { handoff.storeArgument = store }
        let environment = ProcessInfo.processInfo.environment
        for name in secretVariables {
            if let value = environment[name] { handoff.variables[name] = value }
        }
        guard !handoff.isEmpty else { return handoff }
        for name in handoff.variables.keys { unsetenv(name) }
        ProcessImage.rewrite(.arguments) { $0 == store ? redacted : $0 }
        ProcessImage.rewrite(.environment) { entry in
            secretVariables.contains(where: { entry.hasPrefix($0 + "=") }) ? "" : entry
        }
        noCoreFiles()
        return handoff
    }

    /// `arguments` (this process's, without the executable) as the daemon gets them: the
    /// store argument redacted.
    func arguments(_ arguments: [String]) -> [String] {
        guard let storeArgument else { return arguments }
        let redacted = StoreLocator.redacted(storeArgument)
        return arguments.map { $0 == storeArgument ? redacted : $0 }
    }

    /// In the daemon: what `docfs mount` wrote on its standard input, which is then /dev/null.
    static func receive() -> SecretHandoff {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(STDIN_FILENO, &buffer, buffer.count)
            if count > 0 { data.append(contentsOf: buffer[..<count]); continue }
            if count < 0 && errno == EINTR { continue }
            break
        }
        let null = open("/dev/null", O_RDONLY)
        if null >= 0 { dup2(null, STDIN_FILENO); if null != STDIN_FILENO { close(null) } }
        let handoff = decode(data)
        data.resetBytes(in: 0..<data.count)
        for index in buffer.indices { buffer[index] = 0 }
        if !handoff.isEmpty { noCoreFiles() }
        return handoff
    }

    /// NUL-terminated records: `store=ARGUMENT` and `env:NAME=VALUE` (argv and environment
    /// strings cannot hold a NUL).
    func encoded() -> Data {
        var records: [String] = []
        if let storeArgument { records.append("store=" + storeArgument) }
        for (name, value) in variables.sorted(by: { $0.key < $1.key }) { records.append("env:\(name)=\(value)") }
        return Data(records.map { $0 + "\0" }.joined().utf8)
    }

    static func decode(_ data: Data) -> SecretHandoff {
        var handoff = SecretHandoff()
        for record in data.split(separator: 0) {
            let text = String(decoding: record, as: UTF8.self)
            if text.hasPrefix("store=") {
                handoff.storeArgument = String(text.dropFirst("store=".count))
            } else if text.hasPrefix("env:"), let equals = text.firstIndex(of: "=") {
                let name = String(text[text.index(text.startIndex, offsetBy: 4)..<equals])
                if secretVariables.contains(name) { handoff.variables[name] = String(text[text.index(after: equals)...]) }
            }
        }
        return handoff
    }

    private static func noCoreFiles() {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &none)
        // RLIMIT_CORE does not stop a core_pattern pipe (systemd-coredump) from taking a dump,
        // nor a process of the same user from attaching with ptrace or reading /proc/PID/mem,
        // where the secrets kept in memory are. Not dumpable stops all three.
        setNotDumpable()
    }

    /// `prctl(PR_SET_DUMPABLE, 0)`. prctl is variadic, which Swift does not import; it is called
    /// through a pointer typed with its four optional arguments, which is how the Linux calling
    /// conventions pass them to a variadic function too (integers in registers).
    private static func setNotDumpable() {
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        let setDumpable: Int32 = 4      // PR_SET_DUMPABLE (<linux/prctl.h>, not imported either)
        guard let symbol = dlsym(nil, "prctl") else { return }
        _ = unsafeBitCast(symbol, to: Prctl.self)(setDumpable, 0, 0, 0, 0)
    }
}

/// The strings the kernel shows as /proc/self/cmdline and /proc/self/environ: the argv and
/// environment blocks on the initial stack, whose bounds /proc/self/stat gives (fields 48-51).
enum ProcessImage {
    enum Block { case arguments, environment }

    /// Rewrites each NUL-terminated string of `block` in place with `transform`, which may only
    /// shorten it (a longer result is cut); the bytes freed are zeroed. Nothing moves, so the
    /// pointers of `environ` to entries left alone stay valid.
    static func rewrite(_ block: Block, _ transform: (String) -> String) {
        guard let range = bounds(block), range.upperBound > range.lowerBound,
              let base = UnsafeMutablePointer<UInt8>(bitPattern: range.lowerBound) else { return }
        let length = Int(range.upperBound - range.lowerBound)
        var offset = 0
        while offset < length {
            var end = offset
            while end < length && base[end] != 0 { end += 1 }
            let original = String(decoding: UnsafeBufferPointer(start: base + offset, count: end - offset), as: UTF8.self)
            let replaced = transform(original)
            if replaced != original {
                let bytes = Array(replaced.utf8.prefix(end - offset))
                for index in offset..<end { base[index] = index - offset < bytes.count ? bytes[index - offset] : 0 }
            }
            offset = end + 1
        }
    }

    static func bounds(_ block: Block) -> Range<UInt>? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields from the third (state) on; arg_start is field 48, env_end field 51.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        let first = block == .arguments ? 45 : 47
        guard fields.count > first + 1, let start = UInt(fields[first]), let end = UInt(fields[first + 1]),
              start > 0, end > start else { return nil }
        return start..<end
    }
}
