// MountOptions: the command line the way mount(8) and mount.fuse3 give it. `mount -t fuse.docfs
// STORE MOUNTPOINT -o OPTIONS` (or an /etc/fstab line) makes /sbin/mount.fuse3 run
// `docfs STORE MOUNTPOINT -o OPTIONS`, and `mount -t docfs` runs the /sbin/mount.docfs helper
// with `STORE MOUNTPOINT [-sfnv] [-o OPTIONS] [-t TYPE]`. Here that becomes an ordinary
// `docfs mount` command line before ArgumentParser sees it, so `docfs mount` stays the one
// place that validates and runs a mount:
// - every long option of `docfs mount` is also a mount option (`cache_dir=DIR`, `read_only`,
//   `evict_delay=5`; underscore or dash), a flag without a value;
// - the standard options mount(8) and fstab pass are taken: `ro`/`rw`, the kernel flags FUSE
//   understands (`nosuid`, `nodev`, `noatime`, ...) go to FUSE, the fstab-only ones (`noauto`,
//   `_netdev`, `nofail`, `user`, `x-systemd.*`, `comment=`, ...) are dropped;
// - the FUSE options libfuse 3 takes pass through as before (`-o allow_root,fsname=x`);
// - anything else is an error that names it (with `-s`, mount(8)'s "sloppy", a warning).

import ArgumentParser
import Foundation

/// A mount option docfs cannot take, said in one line.
struct MountOptionError: Error, CustomStringConvertible {
    let description: String
}

/// The command line to parse, after the mount(8) form is turned into `docfs mount`.
struct MountInvocation: Equatable {
    /// The arguments for `DocFS` (without the program name).
    var arguments: [String]
    /// `-f` of mount(8): check everything, mount nothing.
    var fake = false
    /// Options that were dropped with `-s` (sloppy): they are named, not fatal.
    var ignored: [String] = []
}

enum MountOptions {
    /// The names a mount helper may be invoked by (a symlink to the docfs binary).
    static let helperNames: Set<String> = ["mount.docfs", "mount.fuse.docfs"]

    /// Options of mount(8) and fstab that mean nothing to a FUSE mount (mount(8), systemd and
    /// file managers read them from fstab); `x-*`, `X-*`, `comment=` and `user=` go too.
    /// The access-time flags libfuse 3.14 does not take ("unknown option"), though fstab lines
    /// carry them: dropped too, FUSE mounts keep the kernel's default (relatime).
    static let fstabOnly: Set<String> = ["defaults", "auto", "noauto", "user", "nouser", "users", "owner",
                                         "group", "_netdev", "nofail", "loud", "silent", "nomand",
                                         "diratime", "nodiratime", "relatime", "norelatime", "strictatime",
                                         "nostrictatime", "lazytime", "nolazytime"]

    /// Mount flags libfuse 3 hands to the kernel (lib/mount.c, `mount_flags`).
    static let kernelFlags: Set<String> = ["suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync",
                                           "dirsync", "atime", "noatime"]

    /// Other options libfuse 3 takes in `fuse_session_new` and `fuse_session_mount`. Not
    /// `subtype=` (docfs finds its mounts by their type, fuse.docfs) nor `blkdev`/`blksize=`
    /// (fuseblk only).
    static let fuseFlags: Set<String> = ["allow_root", "auto_unmount", "default_permissions", "debug"]
    static let fuseValued: Set<String> = ["fsname", "max_read", "context", "fscontext", "defcontext", "rootcontext"]

    /// `docfs mount`'s own options that make no sense as mount options.
    static let notMountOptions: Set<String> = ["help", "version", "daemon-child", "experimental-dump-help",
                                               "generate-completion-script"]

    /// The command line `arguments` (without the program name) as `DocFS` parses it. `program`
    /// is argv[0]; `subcommands` are the names that start any other command.
    static func invocation(_ arguments: [String], program: String, subcommands: Set<String>) throws(MountOptionError) -> MountInvocation {
        let invokedAsHelper = helperNames.contains((program as NSString).lastPathComponent)
        if invokedAsHelper || isMountForm(arguments, subcommands: subcommands) {
            return try helperForm(arguments)
        }
        if arguments.first == "mount" {
            var invocation = try translate(Array(arguments.dropFirst()), sloppy: false)
            invocation.arguments.insert("mount", at: 0)
            return invocation
        }
        return MountInvocation(arguments: arguments)
    }

    /// `docfs STORE MOUNTPOINT ...`: two operands first, the first no subcommand's name.
    static func isMountForm(_ arguments: [String], subcommands: Set<String>) -> Bool {
        guard arguments.count >= 2, let first = arguments.first, !first.hasPrefix("-"), !subcommands.contains(first) else { return false }
        return !arguments[1].hasPrefix("-")
    }

    /// mount(8)'s helper arguments: `STORE MOUNTPOINT [-s] [-f] [-n] [-v] [-t TYPE] [-o OPTIONS]`.
    static func helperForm(_ arguments: [String]) throws(MountOptionError) -> MountInvocation {
        var rest: [String] = []
        var sloppy = false, fake = false
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "-s": sloppy = true
            case "-f": fake = true
            case "-n": break  // "no mtab": docfs writes none
            case "-t": index += 1  // the type (fuse.docfs, docfs) is ours by definition
            case "-N": throw MountOptionError(description: "mounting into another namespace (-N) is not supported")
            case "--":
                rest += arguments[index...]
                index = arguments.count
                continue
            default: rest.append(argument)
            }
            index += 1
        }
        var invocation = try translate(rest, sloppy: sloppy)
        invocation.arguments.insert("mount", at: 0)
        invocation.fake = fake
        return invocation
    }

    /// `docfs mount` arguments with every `-o LIST` taken apart into docfs options and the FUSE
    /// options that stay behind one `-o`.
    static func translate(_ arguments: [String], sloppy: Bool) throws(MountOptionError) -> MountInvocation {
        let own = longOptions
        var result: [String] = []
        var fuse: [String] = []
        var readOnly: Bool?
        var unknown: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            let list: String
            if argument == "--" {
                result += arguments[index...]
                break
            } else if argument == "-o", index + 1 < arguments.count {
                list = arguments[index + 1]
                index += 2
            } else if argument.hasPrefix("-o"), argument.count > 2 {
                list = String(argument.dropFirst(2))
                index += 1
            } else {
                if argument == "--read-only" { readOnly = true } else { result.append(argument) }
                index += 1
                continue
            }
            for option in split(list) {
                let (name, value) = nameAndValue(option)
                let dashed = name.replacingOccurrences(of: "_", with: "-")
                if fstabOnly.contains(name) || name.hasPrefix("x-") || name.hasPrefix("X-")
                    || (value != nil && (name == "comment" || name == "user")) {
                    continue
                } else if option == "ro" || dashed == "read-only" {
                    guard value == nil else { throw MountOptionError(description: "mount option \(name) takes no value (got '\(option)')") }
                    readOnly = true
                } else if option == "rw" {
                    readOnly = false
                } else if kernelFlags.contains(option) || fuseFlags.contains(option) || (value != nil && fuseValued.contains(name)) {
                    fuse.append(option)
                } else if let takesValue = own[dashed] {
                    if takesValue {
                        guard let value, !value.isEmpty else {
                            throw MountOptionError(description: "mount option \(name) needs a value (\(name)=...)")
                        }
                        result += ["--\(dashed)", value]
                    } else {
                        guard value == nil else { throw MountOptionError(description: "mount option \(name) takes no value (got '\(option)')") }
                        result.append("--\(dashed)")
                    }
                } else {
                    unknown.append(option)
                }
            }
        }
        var ignored: [String] = []
        if !unknown.isEmpty {
            guard sloppy else {
                throw MountOptionError(description: "unknown mount option\(unknown.count == 1 ? "" : "s"): \(unknown.joined(separator: ", ")) "
                                       + "(docfs takes the long options of 'docfs mount --help' as name=value or name, "
                                       + "ro/rw, the FUSE options and the usual fstab ones)")
            }
            ignored = unknown
        }
        if readOnly == true { result.append("--read-only") }
        if !fuse.isEmpty { result += ["-o", fuse.joined(separator: ",")] }
        return MountInvocation(arguments: result, ignored: ignored)
    }

    /// Splits a mount option list at commas; a backslash keeps the next character (`fsname=a\,b`).
    static func split(_ list: String) -> [String] {
        var options: [String] = []
        var current = ""
        var escaped = false
        for character in list {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                current.append(character)
                escaped = true
            } else if character == "," {
                if !current.isEmpty { options.append(current) }
                current = ""
            } else {
                current.append(character)
            }
        }
        if !current.isEmpty { options.append(current) }
        return options
    }

    static func nameAndValue(_ option: String) -> (String, String?) {
        guard let equals = option.firstIndex(of: "=") else { return (option, nil) }
        return (String(option[..<equals]), String(option[option.index(after: equals)...]))
    }

    /// `docfs mount`'s long options, each with whether it takes a value, read from the
    /// command's own description (ArgumentParser's help dump), so an option added to
    /// `MountCommand` is a mount option without a second list to keep.
    static var longOptions: [String: Bool] {
        guard let data = MountCommand._dumpHelp().data(using: .utf8),
              let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let command = root["command"] as? [String: Any],
              let arguments = command["arguments"] as? [[String: Any]] else { return [:] }
        var options: [String: Bool] = [:]
        for argument in arguments {
            guard let kind = argument["kind"] as? String, kind == "option" || kind == "flag" else { continue }
            for name in argument["names"] as? [[String: Any]] ?? [] {
                guard name["kind"] as? String == "long", let long = name["name"] as? String,
                      !notMountOptions.contains(long) else { continue }
                options[long] = kind == "option"
            }
        }
        return options
    }
}
