import Foundation
import Testing
@testable import SyncAgentCore

/// A job's own `min_speed` and `min_speed_time`, and `name_from_server`
/// (the job's, and the config's as its default), as the parser reads them.
@Suite("Job keys: min_speed, name_from_server")
struct JobSpeedAndNameKeysTests {
    let parser = JobParser(downloadDir: "/dl")

    func spec(_ text: String, parser: JobParser? = nil) throws -> TaskSpec {
        guard case .transfer(_, let spec) = try (parser ?? self.parser).parse(Array(("url = \"https://h/get?id=1\"\n" + text).utf8)) else {
            throw KeyError(key: nil, "not a transfer")
        }
        return spec
    }

    func rejection(_ text: String, parser: JobParser? = nil) -> String? {
        do {
            _ = try spec(text, parser: parser)
            return nil
        } catch {
            return (error as? KeyError)?.description ?? "\(error)"
        }
    }

    @Test func aJobSetsItsOwnLowestSpeed() throws {
        let own = try spec("min_speed = \"4K\"\nmin_speed_time = 30\n")
        #expect(own.minSpeed == 4096)
        #expect(own.minSpeedTimeS == 30)
        #expect(try spec("min_speed = 512\n").minSpeed == 512)
        // 0 turns the check off for this job: kept as 0, over a config that sets one.
        #expect(try spec("min_speed = 0\n").minSpeed == 0)
        #expect(try spec("min_speed = \"0\"\n").minSpeed == 0)
        let none = try spec("")
        #expect(none.minSpeed == nil && none.minSpeedTimeS == nil)
        // Any kind of transfer may crawl.
        #expect(try spec("kind = \"data\"\nmin_speed = \"1M\"\n").minSpeed == 1 << 20)
    }

    @Test(arguments: [
        ("min_speed = -5\n", "min_speed"),
        ("min_speed = \"fast\"\n", "min_speed"),
        ("min_speed = true\n", "min_speed"),
        ("min_speed_time = 0\n", "min_speed_time"),
        ("min_speed_time = -1\n", "min_speed_time"),
        ("min_speed_time = \"2m\"\n", "min_speed_time"),
        ("min_speed_time = 99999999999\n", "min_speed_time"),
    ])
    func aBadSpeedKeyIsNamed(text: String, key: String) throws {
        let error = try #require(rejection(text))
        #expect(error.hasPrefix("key \"\(key)\""), "\(error)")
    }

    @Test func aDownloadWithoutDestIsNamedByItsServerWhenAsked() throws {
        let named = try spec("name_from_server = true\n")
        #expect(named.nameFromServer == true)
        // Its partial file's place until the answer: the name its URL gives.
        #expect(named.dest == "/dl/get")
        #expect(try spec("name_from_server = false\n").nameFromServer == nil)
        #expect(try spec("").nameFromServer == nil)
    }

    @Test func theConfigsDefaultAppliesWhereAJobCanBeNamedSo() throws {
        let byDefault = JobParser(downloadDir: "/dl", nameFromServer: true)
        #expect(try spec("", parser: byDefault).nameFromServer == true)
        #expect(try spec("name_from_server = false\n", parser: byDefault).nameFromServer == nil)
        // A job that names its file, fetches only if changed, or is no download keeps its ways.
        #expect(try spec("dest = \"mine.bin\"\n", parser: byDefault).nameFromServer == nil)
        #expect(try spec("overwrite = \"update\"\n", parser: byDefault).nameFromServer == nil)
        #expect(try spec("kind = \"hls\"\n", parser: byDefault).nameFromServer == nil)
        #expect(try spec("kind = \"data\"\n", parser: byDefault).nameFromServer == nil)
    }

    @Test(arguments: [
        ("name_from_server = true\ndest = \"x.bin\"\n", "dest"),
        ("name_from_server = true\noverwrite = \"update\"\n", "update"),
        ("name_from_server = true\nkind = \"hls\"\n", "downloads only"),
        ("name_from_server = true\nkind = \"data\"\n", "downloads only"),
        ("name_from_server = \"yes\"\n", "true or false"),
    ])
    func aJobThatCannotBeNamedByItsServerIsRefused(text: String, words: String) throws {
        let error = try #require(rejection(text))
        #expect(error.hasPrefix("key \"name_from_server\""), "\(error)")
        #expect(error.contains(words), "\(error)")
    }

    @Test func theKeysGoThroughTheLogAndBack() throws {
        let spec = try spec("min_speed = 0\nmin_speed_time = 45\nname_from_server = true\n")
        guard case .created(let back) = try EventCoding.body(type: "created", data: EventCoding.data(of: .created(spec))) else {
            Issue.record("not a created event"); return
        }
        #expect(back == spec)
        // A log without them (any written before) reads as before.
        let plain = try self.spec("")
        #expect(!EventCoding.data(of: .created(plain)).contains("min_speed"))
        #expect(!EventCoding.data(of: .created(plain)).contains("name_from_server"))
    }

    @Test func theConfigReadsNameFromServer() throws {
        #expect(try AgentConfig.parse("name_from_server = true\n").nameFromServer)
        #expect(try !AgentConfig.parse("").nameFromServer)
        #expect(throws: KeyError.self) { try AgentConfig.parse("name_from_server = 1\n") }
    }

    @Test func aSegmentOfAVideoTakesItsJobsLowestSpeed() throws {
        let parent = try spec("kind = \"hls\"\nmin_speed = \"2K\"\nmin_speed_time = 20\n")
        let task = TaskState(id: "v", spec: parent, seq: 1, atMs: 0)
        let playlist = try HLSPlaylist.parse(Array("#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n#EXT-X-ENDLIST\n".utf8),
                                             base: "https://h/v.m3u8")
        guard case .media(let media) = playlist else { Issue.record("not a media playlist"); return }
        let plan = try HLSFanOut.plan(parent: task, playlist: media, url: "https://h/v.m3u8", in: AgentState())
        let child = try #require(plan.children.first)
        #expect(child.spec.minSpeed == 2048)
        #expect(child.spec.minSpeedTimeS == 20)
    }
}
