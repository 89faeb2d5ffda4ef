import Mustache

/// The dashboard's pages as mustache templates. Every value goes in as `{{name}}`, which escapes
/// `& < > " '` for text and quoted attributes alike; the raw forms (`{{{name}}}`, `{{& name}}`) are never
/// used, and a test fails if one appears (SVGChartTests). No inline script, no inline style:
/// the Content-Security-Policy allows neither.
enum DashboardTemplates {
    static let sources: [String: String] = [
        "head": head, "foot": foot, "triage": triage, "patient": patient, "chart": chart, "calendar": calendar,
    ]

    /// Every template, parsed once; a template that does not parse is missing (its page renders empty).
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in sources {
            if let template = try? MustacheTemplate(string: text) { library.register(template, named: name) }
        }
        return library
    }()

    static let head = """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{pageTitle}} · CareVault</title>
        <link rel="stylesheet" href="{{base}}static/dashboard.css">
        <script src="{{base}}static/live.js" defer></script>
        </head>
        <body data-live="{{live}}" data-events="{{base}}events">
        <header><a class="home" href="{{base}}">CareVault</a> <span class="who">{{roleLabel}} dashboard · decrypted on this machine only</span>
        <span id="live-state" class="live-state" aria-live="polite"></span></header>
        <main>

        """

    static let foot = """
        </main>
        <footer>Served by your own tool on 127.0.0.1; nothing shown here is sent anywhere. Read at {{renderedAt}}.</footer>
        </body>
        </html>

        """

    static let triage = """
        {{> head}}
        <h1>My patients</h1>
        <p class="sort">Sort by: {{#orders}}<a href="{{base}}{{link}}"{{#current}} aria-current="true" class="current"{{/current}}>{{label}}</a> {{/orders}}</p>
        {{#unverified}}<p class="note" id="unverified">{{unverified}}</p>{{/unverified}}
        <table class="triage" id="triage">
        <thead><tr><th scope="col">Patient</th><th scope="col">Integrity</th><th scope="col">Categories</th><th scope="col">7 days</th><th scope="col">30 days</th><th scope="col">Trend</th><th scope="col">Last change</th><th scope="col">As of</th></tr></thead>
        <tbody>
        {{#rows}}<tr class="patient-row" data-patient="{{username}}">
        <th scope="row"><a href="{{base}}{{link}}">{{username}}</a></th>
        <td><span class="integrity {{integrityClass}}" title="{{integrityDetail}}">{{integrityLabel}}</span></td>
        <td>{{categories}}</td><td class="num">{{week}}</td><td class="num">{{month}}</td><td>{{trend}}</td><td>{{lastChange}}</td><td>{{asOf}}</td>
        </tr>
        {{/rows}}
        {{^rows}}<tr><td colspan="8">No patient shares data with you yet.</td></tr>{{/rows}}
        </tbody>
        </table>
        {{> foot}}
        """

    static let patient = """
        {{> head}}
        <h1 id="patient-name">{{username}}</h1>
        <p class="status"><span class="integrity {{integrityClass}}">{{integrityLabel}}</span> <span class="detail">{{integrityDetail}}</span></p>
        <p class="asof">As of <span id="as-of">{{asOf}}</span>{{#categories}} · categories: {{categories}}{{/categories}}</p>
        {{#awaitingKeys}}<p class="note">Approved, keys not delivered yet: {{awaitingKeys}} (the patient's device sends them at its next sync).</p>{{/awaitingKeys}}
        {{#serverBehind}}<p class="note" id="server-behind">{{serverBehind}}.</p>{{/serverBehind}}
        <p class="exports">Download: <a href="{{base}}{{csvLink}}" download>CSV</a> · <a href="{{base}}{{fhirLink}}" download>FHIR R4 Bundle</a>{{#downloadNote}} <span class="note" id="download-note">{{downloadNote}}</span>{{/downloadNote}}</p>
        <section aria-labelledby="calendar-heading"><h2 id="calendar-heading">Adherence, last 5 weeks</h2>
        {{#calendar}}{{> calendar}}{{/calendar}}
        </section>
        <section aria-labelledby="activities-heading"><h2 id="activities-heading">Activities</h2>
        {{#activities}}<article class="activity" data-activity="{{id}}">
        <h3 class="activity-title">{{title}}</h3>
        <p class="schedule">{{category}} · {{schedule}}</p>
        {{#instructions}}<p class="instructions">{{instructions}}</p>{{/instructions}}
        {{#chart}}{{> chart}}{{/chart}}
        {{#hasMarks}}<ol class="marks" aria-label="yes/no answers">{{#marks}}<li class="mark {{cls}}" title="{{label}}">{{symbol}}<span class="visually-hidden">{{label}}</span></li>{{/marks}}</ol>{{/hasMarks}}
        {{#hasTexts}}<ul class="texts">{{#texts}}<li><time>{{date}}</time> {{text}}</li>{{/texts}}</ul>{{/hasTexts}}
        {{#hasNotes}}<h4>Notes</h4><ul class="notes">{{#notes}}<li><time>{{date}}</time> {{text}}</li>{{/notes}}</ul>{{/hasNotes}}
        </article>
        {{/activities}}
        {{^activities}}<p>No activities.</p>{{/activities}}
        </section>
        {{#isPatient}}
        <section aria-labelledby="shares-heading"><h2 id="shares-heading">My shares</h2>
        <table class="shares"><thead><tr><th scope="col">Doctor</th><th scope="col">Category</th><th scope="col">State</th><th scope="col">Since</th><th scope="col">Expires</th></tr></thead><tbody>
        {{#shares}}<tr><td>{{doctor}}</td><td>{{category}}</td><td>{{state}}</td><td>{{since}}</td><td>{{expires}}</td></tr>{{/shares}}
        {{^shares}}<tr><td colspan="5">You share nothing with any doctor.</td></tr>{{/shares}}
        </tbody></table></section>
        <section aria-labelledby="log-heading"><h2 id="log-heading">Who read my data</h2>
        <p class="anchor">{{logAnchor}}</p>
        {{#logProblem}}<p class="note bad" id="log-problem">{{logProblem}}</p>{{/logProblem}}
        {{#logRewritten}}<p class="note" id="log-rewritten">{{logRewritten}}</p>{{/logRewritten}}
        <table class="access-log"><thead><tr><th scope="col">Time</th><th scope="col">What</th><th scope="col">Checked</th><th scope="col">Details</th></tr></thead><tbody>
        {{#log}}<tr><td>{{time}}</td><td>{{action}}</td><td>{{checked}}</td><td>{{details}}</td></tr>{{/log}}
        </tbody></table></section>
        {{/isPatient}}
        {{> foot}}
        """

    static let chart = """
        <figure class="chart">
        <svg xmlns="http://www.w3.org/2000/svg" class="chart-svg" viewBox="0 0 {{width}} {{height}}" role="img" aria-labelledby="{{id}}-title {{id}}-desc">
        <title id="{{id}}-title">{{title}}{{#units}} ({{units}}){{/units}}</title>
        <desc id="{{id}}-desc">{{desc}}</desc>
        <line class="axis" x1="{{plotLeft}}" y1="{{plotBottom}}" x2="{{plotRight}}" y2="{{plotBottom}}"/>
        {{#ticks}}<line class="grid" x1="{{plotLeft}}" y1="{{y}}" x2="{{plotRight}}" y2="{{y}}"/><text class="tick" x="{{plotLeft}}" y="{{y}}" dx="-6" dy="4" text-anchor="end">{{label}}</text>{{/ticks}}
        {{#dates}}<text class="tick" x="{{x}}" y="{{height}}" dy="-10" text-anchor="{{anchor}}">{{label}}</text>{{/dates}}
        {{#target}}<line class="target" x1="{{plotLeft}}" y1="{{y}}" x2="{{plotRight}}" y2="{{y}}"/><text class="target-label" x="{{plotRight}}" y="{{y}}" dy="-4" text-anchor="end">{{label}}</text>{{/target}}
        {{^empty}}<polyline class="series" points="{{polyline}}"/>{{/empty}}
        {{#points}}<circle class="point" cx="{{x}}" cy="{{y}}" r="4"><title>{{label}}</title></circle>{{/points}}
        {{#empty}}<text class="empty" x="{{plotLeft}}" y="{{plotBottom}}" dx="12" dy="-12">No values recorded yet.</text>{{/empty}}
        </svg>
        <figcaption>{{title}}: {{desc}}</figcaption>
        </figure>
        """

    static let calendar = """
        <svg xmlns="http://www.w3.org/2000/svg" class="calendar" viewBox="0 0 {{width}} {{height}}" role="img" aria-labelledby="calendar-title">
        <title id="calendar-title">{{summary}}</title>
        {{#cells}}<rect class="day {{level}}" x="{{x}}" y="{{y}}" width="18" height="18" rx="3"><title>{{label}}</title></rect>{{/cells}}
        </svg>
        <p class="legend"><span class="day-key none"></span> nothing scheduled <span class="day-key l0"></span> none done <span class="day-key l2"></span> some <span class="day-key l4"></span> all done</p>
        """
}
