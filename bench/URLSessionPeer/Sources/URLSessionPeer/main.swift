import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// URLSessionPeer LIST CONCURRENCY — LIST has one "URL DEST" per line.
// Downloads every URL with downloadTask, at most CONCURRENCY at once, moving
// each finished temp file to DEST. Exits 1 if any download failed.

let arguments = CommandLine.arguments
guard arguments.count == 3, let list = try? String(contentsOfFile: arguments[1], encoding: .utf8),
      let concurrency = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: URLSessionPeer LIST CONCURRENCY\n".utf8))
    exit(2)
}
let jobs = list.split(separator: "\n").map { line -> (URL, URL) in
    let parts = line.split(separator: " ", maxSplits: 1)
    return (URL(string: String(parts[0]))!, URL(fileURLWithPath: String(parts[1])))
}

let configuration = URLSessionConfiguration.default
configuration.httpMaximumConnectionsPerHost = concurrency
configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
configuration.urlCache = nil
let session = URLSession(configuration: configuration)
let slots = DispatchSemaphore(value: concurrency)
let group = DispatchGroup()
let failures = NSLock()
var failed = 0

for (source, dest) in jobs {
    slots.wait()
    group.enter()
    session.downloadTask(with: source) { location, response, error in
        defer { slots.signal(); group.leave() }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard error == nil, status == 200, let location else {
            failures.lock(); failed += 1; failures.unlock()
            return
        }
        try? FileManager.default.removeItem(at: dest)
        do { try FileManager.default.moveItem(at: location, to: dest) } catch {
            failures.lock(); failed += 1; failures.unlock()
        }
    }.resume()
}
group.wait()
exit(failed == 0 ? 0 : 1)
