// The mount(8) form of the command line (`docfs STORE MOUNTPOINT -o OPTIONS`, the mount.docfs
// helper) turned into `docfs mount` arguments, and what ArgumentParser then makes of them.

@testable import docfs
import Foundation
import Logging
import Testing

@Suite("mount options (-o, mount(8), fstab)")
struct MountOptionsTests {
    let subcommands: Set<String> = ["mount", "unmount", "serve", "pin", "unpin", "evict", "status", "help"]

    func invocation(_ arguments: [String], program: String = "/usr/local/bin/docfs") throws -> MountInvocation {
        try MountOptions.invocation(arguments, program: program, subcommands: subcommands)
    }

    @Test("docfs STORE MOUNTPOINT -o ...: docfs options become long options, the rest stays behind -o")
    func mountForm() throws {
        let result = try invocation(["/srv/store", "/mnt/docs", "-o", "cache_dir=/c,read_only,evict-delay=5,nosuid,noatime,allow_other"])
        #expect(result.arguments == ["mount", "/srv/store", "/mnt/docs", "--cache-dir", "/c", "--evict-delay", "5",
                                     "--allow-other", "--read-only", "-o", "nosuid,noatime"])
        #expect(!result.fake && result.ignored.isEmpty)
    }

    @Test("what ArgumentParser makes of it: the options are set as if given long")
    func parsed() throws {
        let result = try invocation(["http://h/", "/m", "-o", "cache_dir=/c,ro,log_level=debug,dir_cache_ttl=5,uid=0,umask=022,no_symlinks,region=eu-west-1"])
        let command = try MountCommand.parse(Array(result.arguments.dropFirst()))
        #expect(command.store == "http://h/" && command.mountpoint == "/m")
        #expect(command.cacheDir == "/c" && command.readOnly && command.logLevel == .debug && command.dirCacheTtl == 5)
        #expect(command.access.uid == "0" && command.access.umask == "022")
        #expect(command.s3.noSymlinks && command.s3.region == "eu-west-1")
        #expect(command.options.isEmpty)
    }

    @Test("every long option of docfs mount is a mount option")
    func everyLongOption() throws {
        let options = MountOptions.longOptions
        #expect(options["cache-dir"] == true && options["state-dir"] == true && options["read-only"] == false && options["log-level"] == true)
        #expect(options["daemon-child"] == nil && options["help"] == nil)
        for (name, takesValue) in options {
            let option = name.replacingOccurrences(of: "-", with: "_") + (takesValue ? "=1" : "")
            let result = try invocation(["/s", "/m", "-o", option])
            #expect(result.arguments.contains("--\(name)"), "\(option) -> \(result.arguments)")
        }
    }

    @Test("fstab-only options are dropped; ro and rw: the last one wins")
    func fstabOptions() throws {
        let result = try invocation(["/s", "/m", "-o", "defaults,noauto,auto,_netdev,nofail,user,users,nouser,owner,group,user=ann,"
                                     + "comment=x,x-systemd.automount,x-systemd.idle-timeout=60,X-mount.mkdir,x-gvfs-show,ro,rw"])
        #expect(result.arguments == ["mount", "/s", "/m"])
        #expect(try invocation(["/s", "/m", "-o", "rw", "-o", "ro"]).arguments == ["mount", "/s", "/m", "--read-only"])
        #expect(try invocation(["/s", "/m", "--read-only", "-o", "rw"]).arguments == ["mount", "/s", "/m"])
        // Time flags libfuse 3.14 refuses go too; noatime, which it takes, stays.
        #expect(try invocation(["/s", "/m", "-o", "relatime,nodiratime,lazytime,strictatime,noatime"]).arguments
                == ["mount", "/s", "/m", "-o", "noatime"])
    }

    @Test("FUSE options pass through, an escaped comma stays in its value")
    func fuseOptions() throws {
        let result = try invocation(["/s", "/m", "-o", "allow_root,auto_unmount,dev,suid,fsname=a\\,b,max_read=131072", "-odirsync"])
        #expect(result.arguments == ["mount", "/s", "/m", "-o", "allow_root,auto_unmount,dev,suid,fsname=a\\,b,max_read=131072,dirsync"])
        #expect(MountCommand.escapedMountOption("http://h/a,b\\c") == "http://h/a\\,b\\\\c")
    }

    @Test("an unknown option is an error naming it (and only it); with -s it is named and ignored")
    func unknownOptions() throws {
        do {
            _ = try invocation(["/s", "/m", "-o", "cache_dir=/c,bogus_option,evict_delay=5"])
            Issue.record("an unknown option was taken")
        } catch {
            let message = "\(error)"
            #expect(message.contains("unknown mount option: bogus_option"))
            #expect(!message.contains("cache_dir") && !message.contains("evict_delay"))
        }
        #expect(throws: MountOptionError.self) { try invocation(["mount", "/s", "/m", "-o", "bogus"]) }
        #expect(throws: MountOptionError.self) { try invocation(["/s", "/m", "-o", "read_only=yes"]) }
        #expect(throws: MountOptionError.self) { try invocation(["/s", "/m", "-o", "cache_dir"]) }
        // Another type than fuse.docfs would hide the mount from docfs itself.
        #expect(throws: MountOptionError.self) { try invocation(["/s", "/m", "-o", "subtype=other"]) }
        let sloppy = try invocation(["/s", "/m", "-s", "-o", "bogus,nosuid"])
        #expect(sloppy.ignored == ["bogus"] && sloppy.arguments == ["mount", "/s", "/m", "-o", "nosuid"])
    }

    @Test("as /sbin/mount.docfs: mount(8)'s -n, -t, -v, -f")
    func helper() throws {
        let result = try invocation(["/s", "/m", "-n", "-v", "-o", "read_only", "-t", "docfs", "-f"], program: "/sbin/mount.docfs")
        #expect(result.arguments == ["mount", "/s", "/m", "-v", "--read-only"])
        #expect(result.fake)
        #expect(throws: MountOptionError.self) { try invocation(["/s", "/m", "-N", "1234"], program: "mount.fuse.docfs") }
    }

    @Test("other command lines are left alone")
    func otherCommands() throws {
        for arguments in [["pin", "a", "b"], ["status", "--json"], ["--help"], ["--version"], ["foo"], ["help", "mount"],
                          ["serve", "/d", "--port", "8080"], [], ["/s", "--foreground", "/m"]] {
            #expect(try invocation(arguments).arguments == arguments)
        }
        // `docfs mount` itself: its -o takes docfs options too; the FUSE ones stay.
        #expect(try invocation(["mount", "/s", "/m", "-o", "allow_other", "--foreground"]).arguments
                == ["mount", "/s", "/m", "--allow-other", "--foreground"])
        #expect(try invocation(["mount", "/s", "/m", "-o", "dev"]).arguments == ["mount", "/s", "/m", "-o", "dev"])
    }
}
