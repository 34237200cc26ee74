import Foundation

/// Which `#EXT-X-MEDIA` renditions of the chosen variant a video takes
/// (SPEC §10, the job keys `audio` and `subtitles`), as players choose:
///
/// - `audio` absent or `"default"`: the variant's AUDIO group's rendition
///   with `DEFAULT=YES`, else `AUTOSELECT=YES`, else its first. A video
///   without its sound is what nobody asked for, so an absent key takes it too.
/// - `audio = "none"`: no rendition; the variant's own segments alone.
/// - `audio = LANG` or `subtitles = LANG`: the rendition of that language
///   (RFC 5646, any case): the same tag, else one it is a prefix of (`en`
///   takes `en-US`), else one that is a prefix of it (`en-US` takes `en`);
///   among several, the default, then the autoselected, then the first.
///
/// A rendition without a URI plays from the variant's segments: nothing
/// more to fetch. What is chosen and has a URI is returned, sound first.
public enum HLSRenditionChoice {
    public struct Refusal: Error, Equatable, CustomStringConvertible, Sendable {
        public var description: String
        public var code: FailureCode
    }

    /// An RFC 5646 language tag as written (`en`, `pt-BR`, `zh-Hant-TW`): letters, then subtags of letters and digits.
    public static func isLanguageTag(_ text: String) -> Bool {
        text.range(of: #"^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8}){0,7}$"#, options: .regularExpression) != nil
    }

    /// Languages an error names, at most: a master of 10,000 renditions made an error of every one.
    static let languagesNamed = 8

    public static func choose(for variant: HLSVariant, options: HLSOptions) throws -> [HLSRendition] {
        var chosen: [HLSRendition] = []
        switch options.audio ?? HLSOptions.defaultAudio {
        case HLSOptions.noAudio:
            break
        case HLSOptions.defaultAudio:
            if let rendition = preferred(variant.audioRenditions), rendition.uri != nil { chosen.append(rendition) }
        case let language:
            guard let rendition = matching(language, in: variant.audioRenditions) else {
                throw refusal("audio", language, offered: variant.audioRenditions, group: variant.audioGroup)
            }
            if rendition.uri != nil { chosen.append(rendition) }
        }
        if let language = options.subtitles {
            let offered = variant.subtitleRenditions.filter { $0.uri != nil }
            guard let rendition = matching(language, in: offered) else {
                throw refusal("subtitles", language, offered: offered, group: variant.subtitlesGroup)
            }
            chosen.append(rendition)
        }
        return chosen
    }

    /// The group's default rendition: `DEFAULT=YES`, else `AUTOSELECT=YES`, else the first (two
    /// defaults, against the RFC: the first, as hls.js takes it).
    static func preferred(_ renditions: [HLSRendition]) -> HLSRendition? {
        renditions.first(where: \.isDefault) ?? renditions.first(where: \.autoselect) ?? renditions.first
    }

    static func matching(_ wanted: String, in renditions: [HLSRendition]) -> HLSRendition? {
        let wanted = wanted.lowercased()
        let tags = renditions.map { $0.language?.trimmingCharacters(in: .whitespaces).lowercased() ?? "" }
        let rules: [(String) -> Bool] = [
            { $0 == wanted },
            { $0.hasPrefix(wanted + "-") },
            { !$0.isEmpty && wanted.hasPrefix($0 + "-") },
        ]
        for rule in rules {
            let found = zip(renditions, tags).filter { rule($0.1) }.map(\.0)
            if let rendition = preferred(found) { return rendition }
        }
        return nil
    }

    private static func refusal(_ key: String, _ language: String, offered: [HLSRendition], group: String?) -> Refusal {
        var seen = Set<String>()
        let languages = offered.compactMap { rendition -> String? in
            guard let language = rendition.language, seen.insert(language.lowercased()).inserted else { return nil }
            return Printable.escaping(String(language.prefix(35)))
        }
        let kind = key == "audio" ? "sound" : "subtitles"
        guard !languages.isEmpty else {
            let why = group == nil ? "offers no \(kind) renditions" : "offers no \(kind) rendition with a LANGUAGE"
            return Refusal(description: "\(key) = \"\(language)\": the chosen variant \(why)", code: .noRendition)
        }
        let named = languages.prefix(languagesNamed).joined(separator: ", ")
            + (languages.count > languagesNamed ? " and \(languages.count - languagesNamed) more" : "")
        return Refusal(description: "\(key) = \"\(language)\": no \(kind) rendition of the chosen variant has that language "
                       + "(it offers \(named))", code: .noRendition)
    }
}
