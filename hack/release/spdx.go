package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// spdxDoc is the part of SPDX 2.3 an SBOM of one Go binary uses.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string         `json:"SPDXID"`
	Name             string         `json:"name"`
	VersionInfo      string         `json:"versionInfo"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	LicenseConcluded string         `json:"licenseConcluded"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdx is the SBOM of the Go binary bin: the binary itself (with its
// SHA-256), the Go toolchain and every module it was built from, as Go
// recorded them in it.
func spdx(bin, version string, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("reading the build info of %s: %w", bin, err)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	sum := checksum(content)
	base := filepath.Base(bin)
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: base + "-" + version,
		DocumentNamespace: fmt.Sprintf("https://github.com/daytwo-dev/daytwo/spdx/%s-%s-%s", base, version, sum[:16]),
		CreationInfo:      spdxCreation{Created: created.Format(time.RFC3339), Creators: []string{"Tool: daytwo-hack-release"}},
	}
	main := spdxPackage{SPDXID: "SPDXRef-Package-daytwo", Name: info.Main.Path, VersionInfo: version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "Apache-2.0", Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: sum}},
		ExternalRefs: []spdxRef{purl(info.Main.Path, version)}}
	goPkg := spdxPackage{SPDXID: "SPDXRef-Package-go", Name: "go", VersionInfo: info.GoVersion, DownloadLocation: "https://go.dev/dl/",
		LicenseConcluded: "NOASSERTION", ExternalRefs: []spdxRef{purl("stdlib", strings.TrimPrefix(info.GoVersion, "go"))}}
	doc.Packages = append(doc.Packages, main, goPkg)
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", main.SPDXID},
		spdxRelationship{goPkg.SPDXID, "BUILD_TOOL_OF", main.SPDXID})
	for i, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		p := spdxPackage{SPDXID: fmt.Sprintf("SPDXRef-Package-%d", i), Name: d.Path, VersionInfo: d.Version,
			DownloadLocation: "https://proxy.golang.org/" + escape(d.Path) + "/@v/" + escape(d.Version) + ".zip",
			LicenseConcluded: "NOASSERTION", ExternalRefs: []spdxRef{purl(d.Path, d.Version)}}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{main.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	return json.MarshalIndent(doc, "", "  ")
}

func purl(path, version string) spdxRef {
	return spdxRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}
}

// escape is a module path or version as the module proxy spells it: each
// capital letter as ! and the letter in lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
